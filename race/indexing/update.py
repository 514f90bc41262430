"""``race index CORPUS --out DIR --update``: bring an index to a changed corpus without building
it again.

The documents are compared by fingerprint (``race.indexing.indexing.document_digests``: every chunk's
text, spans, metadata and source hash) with the ones the index recorded: added, changed and
removed documents are the only ones any backend touches. tantivy deletes the changed and
removed documents by term and adds the changed and added ones; LanceDB deletes their rows and
merges in the new ones (``merge_insert`` on ``chunk_id``), embedding only texts it does not
hold yet; the graph replaces those documents' nodes and the edges that changed. Each backend's
result is a new generation, and the index it gives equals a whole build of the corpus in
every piece of evidence (custody generations aside).

The update runs on a copy of the index beside it (``.NAME.building-PID``), moved in place only
when every backend succeeded, as a build is; a disk that cannot take the copy is one line
naming the index and the cause, the partial copy removed. An index a killed build had moved
aside (``.NAME.previous-PID``) is put back first, then updated. An index the update cannot extend (none yet, one
built before document fingerprints, another corpus schema, another embedding model, vectors
now present or absent) is built whole, with a notice saying why.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from race.indexing.indexing import (
    DOCUMENTS,
    MANIFEST,
    Files,
    Report,
    _progress,
    build_index,
    corpus_embedder,
    document_digests,
    finish_staging,
    load_for_index,
    read_index_schema,
    read_manifest,
    start_staging,
)
from race.indexing.staging import clear_dead_builds, disk_error
from rsc import Record

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus
    from backends.models.embedding import Embedder


class UpdateSummary(Record):
    """What an update did: each backend's new generation, the documents it touched, and how
    many chunks and distinct texts it embedded."""

    generations: dict[str, str]
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: int = 0
    chunks_embedded: int = 0
    """Chunks of the added and changed documents: the rows the vector index wrote anew."""
    texts_embedded: int = 0
    """Distinct texts the model embedded for them (texts the table held already are reused)."""
    vectors: bool = True
    """Whether the index has a vector index (``False``: lexical only, nothing embedded)."""
    rebuilt: str | None = Field(default=None)
    """Why the index was built whole instead (``None``: it was updated)."""


def update_index(
    corpus_path: Path,
    out: Path,
    report: Report | None = None,
    *,
    embedder: Embedder | None = None,
    vectors: bool = True,
    notice: Callable[[str], None] | None = None,
    files: Files = ((), ()),
) -> UpdateSummary:
    embedder = corpus_embedder(corpus_path, embedder)
    corpus, skipped = load_for_index(corpus_path, embedder=embedder, vectors=vectors, notice=notice, files=files)
    # A killed build may have moved the index aside (``.NAME.previous-PID``): put it back
    # first, so that it is updated rather than built again whole.
    for path in clear_dead_builds(out):
        if ".previous-" in path.name and notice is not None:
            notice(f"put back the index a killed build had moved aside ({path.name})")
    reason = _cannot_update(out, corpus, skipped, embedder)
    if reason is not None:
        if notice is not None:
            notice(f"{reason}: building the index whole")
        generations = build_index(corpus_path, out, report, embedder=embedder, vectors=vectors, files=files)
        return UpdateSummary(
            generations=generations,
            added=corpus.doc_ids,
            chunks_embedded=len(corpus.chunks) if skipped is None else 0,
            texts_embedded=_embedded_texts(out),
            vectors=skipped is None,
            rebuilt=reason,
        )
    old: dict[str, str] = json.loads((out / DOCUMENTS).read_text(encoding="utf-8"))
    new = document_digests(corpus)
    added = tuple(sorted(set(new) - set(old)))
    removed = tuple(sorted(set(old) - set(new)))
    changed = tuple(sorted(d for d in set(new) & set(old) if new[d] != old[d]))
    stale, fresh = sorted((*changed, *removed)), sorted((*changed, *added))
    staging = start_staging(out, copy=True)
    try:
        generations = {}
        from backends.tantivy import TantivyAdapter

        generations["tantivy"] = TantivyAdapter.update(
            corpus, staging, _progress(report, "tantivy"), stale=stale, fresh=fresh
        )
        texts = 0
        if skipped is None:
            generations["lancedb"], texts = _update_lance(corpus, staging, report, embedder, stale, fresh)
        generations["graph"] = _update_graph(corpus, staging, stale, fresh)
        finish_staging(staging, out, corpus, generations, skipped)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if (disk := disk_error(exc, out, staging, "update the index")) is not None:
            raise disk from exc
        raise
    wanted = frozenset(fresh)
    return UpdateSummary(
        generations=generations,
        added=added,
        changed=changed,
        removed=removed,
        unchanged=len(new) - len(added) - len(changed),
        chunks_embedded=sum(1 for c in corpus.chunks if c.doc_id in wanted) if skipped is None else 0,
        texts_embedded=texts,
        vectors=skipped is None,
    )


def _update_lance(
    corpus: Corpus,
    staging: Path,
    report: Report | None,
    embedder: Embedder | None,
    stale: list[str],
    fresh: list[str],
) -> tuple[str, int]:
    from backends.generated import generate_contracts, write_contracts
    from backends.lancedb import LanceAdapter
    from backends.lancedb.build import update_table, with_embedder
    from backends.models.embedding import MiniLMEmbedder

    model = embedder or MiniLMEmbedder()
    path = staging / LanceAdapter.backend
    texts = update_table(corpus, path, _progress(report, "lancedb"), model, stale=stale, fresh=fresh)
    write_contracts(
        path, with_embedder(generate_contracts(LanceAdapter.contracts(), corpus.corpus_schema), model.identity)
    )
    return LanceAdapter.open(staging, embedder=model).generation(), texts


def _update_graph(corpus: Corpus, staging: Path, stale: list[str], fresh: list[str]) -> str:
    from backends.generated import generate_contracts, write_contracts
    from backends.graph import GraphAdapter
    from backends.graph.adjacency import as_networkx
    from backends.graph.store import GRAPH_FILE, read_graph, update_graph, write_graph, write_schema

    folder = staging / GraphAdapter.backend
    read, _, _ = read_graph(folder / GRAPH_FILE)
    graph = as_networkx(read)  # updated in place: networkx's own mutators
    update_graph(graph, corpus, stale=stale, fresh=fresh)
    write_schema(folder, corpus.corpus_schema)
    write_contracts(folder, generate_contracts(GraphAdapter.contracts(), corpus.corpus_schema))
    return write_graph(graph, folder, corpus_revision=corpus.revision)


def _cannot_update(out: Path, corpus: Corpus, skipped: str | None, embedder: Embedder | None) -> str | None:
    """Why the index at ``out`` cannot be brought to ``corpus`` in place (``None``: it can)."""
    if not (out / MANIFEST).is_file():
        return f"no index at {out} yet"
    manifest = read_manifest(out)
    if not (out / DOCUMENTS).is_file():
        return "the index predates document fingerprints"
    if read_index_schema(out) != corpus.corpus_schema:
        return "the corpus schema changed"
    had_vectors = "vectors_skipped" not in manifest
    if had_vectors != (skipped is None):
        return "the index had vectors and this build has none" if had_vectors else "the index had no vectors"
    if had_vectors:
        from backends.lancedb.manifest import read_lance_manifest
        from backends.lancedb.query import MANIFEST as LANCE_MANIFEST
        from backends.models.folder import built_embedder

        built = json.loads((out / "lancedb" / LANCE_MANIFEST).read_text(encoding="utf-8")).get("embedder")
        if built != (embedder or built_embedder(read_lance_manifest(out / "lancedb")[0])).identity.model_dump(
            mode="json"
        ):
            return "the vectors were built with another embedding model"
    return None


def _embedded_texts(out: Path) -> int:
    from backends.lancedb.query import MANIFEST as LANCE_MANIFEST

    path = out / "lancedb" / LANCE_MANIFEST
    if not path.is_file():
        return 0
    return int(json.loads(path.read_text(encoding="utf-8")).get("embedded_texts", 0))
