"""Building an index directory from a corpus: every local backend, then the manifest.

The corpus is read and validated in full before anything is written, and the index is
built in a sibling temporary directory that replaces the target only when every backend
succeeded: bad input leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from backends import LOCAL_ADAPTERS, Adapter
from backends.ingest.schema import CorpusSchema, check_filter, parse_schema, schema_document
from planner import LogicalPlan
from race.indexing.provenance import build_code_digest
from race.indexing.staging import CopyFailed, clear_dead_builds, copy_file, disk_error
from rsc import Contract, IndexMissingError, InputError, canonical_pretty, fingerprint

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus
    from backends.ingest.files import Ingest
    from backends.models.embedding import Embedder

INDEX_SCHEMA_VERSION = "race.index/1"
MANIFEST = "race-index.json"
SCHEMA = "schema.json"
"""The corpus schema the index was built under, beside the manifest."""
DOCUMENTS = "documents.json"
"""Each document's fingerprint (``document_digests``), for ``race index --update``."""

Report = Callable[[str, int, int], None]
Files = tuple[Sequence[str], Sequence[str]]
"""The ``--include`` and ``--exclude`` globs of a folder corpus."""
INGEST = "ingest.json"
"""Every file of a folder corpus accounted for (``backends.ingest.files.Ingest``), beside the manifest."""


def build_index(
    corpus_path: Path,
    out: Path,
    report: Report | None = None,
    *,
    embedder: Embedder | None = None,
    vectors: bool = True,
    notice: Callable[[str], None] | None = None,
    files: Files = ((), ()),
) -> dict[str, str]:
    """Build every local backend's index of ``corpus_path`` into ``out``; return generations.
    ``embedder`` embeds the vector index's chunks (default: the model, in this process).
    Without ``vectors``, or when no embedder is given and the model is not installed, the
    index is lexical only (a cold start): no vector index, and ``notice`` is told why.
    ``files`` are the include and exclude globs that choose a folder corpus's files."""
    embedder = corpus_embedder(corpus_path, embedder)
    corpus, skipped = load_for_index(corpus_path, embedder=embedder, vectors=vectors, notice=notice, files=files)
    staging = start_staging(out)
    try:
        generations: dict[str, str] = {}
        for adapter in LOCAL_ADAPTERS:
            name = adapter.backend
            if skipped is not None and name == "lancedb":
                continue
            if embedder is not None and name == "lancedb":
                from backends.lancedb import LanceAdapter

                generations[name] = LanceAdapter.build(corpus, staging, _progress(report, name), embedder=embedder)
            else:
                generations[name] = adapter.build(corpus, staging, _progress(report, name))
        finish_staging(staging, out, corpus, generations, skipped)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if (disk := disk_error(exc, out, staging, "build the index")) is not None:
            raise disk from exc
        raise
    return generations


def _progress(report: Report | None, name: str) -> Callable[[int, int], None]:
    def progress(done: int, total: int) -> None:
        if report:
            report(name, done, total)

    return progress


def load_for_index(
    corpus_path: Path,
    *,
    embedder: Embedder | None,
    vectors: bool,
    notice: Callable[[str], None] | None,
    files: Files = ((), ()),
) -> tuple[Corpus, str | None]:
    """The corpus, validated in full, cut to the embedder's tokenizer where the model is
    installed (docs/invariants.md#gap-kinds, ``truncated_text``); and why the index gets no
    vector index (``None``: it gets one)."""
    from backends.ingest.corpus import Chunking, load_corpus
    from backends.ingest.schema import schema_path
    from backends.models.embedding import token_counter
    from backends.models.folder import embedder_token_counter

    counter = (embedder_token_counter(embedder) if embedder is not None else None) or token_counter()
    skipped = vectors_skipped(vectors=vectors, embedder=embedder, model_installed=counter is not None)
    if skipped is not None and vectors and notice is not None:
        notice(f"{skipped}; building a lexical-only index (tantivy and graph), vector obligations will be unsatisfied")
    include, exclude = files
    corpus = load_corpus(corpus_path, chunking=Chunking(tokens=counter), include=include, exclude=exclude)
    if notice is not None and corpus_path.is_dir() and schema_path(corpus_path) is None:
        # The folder's own schema: keys no field can be named after are stored, not fields.
        keys = {key for chunk in corpus.chunks for key in chunk.metadata}
        stored = sorted(keys - {"doc_id", *corpus.corpus_schema.fields})
        if stored:
            notice(
                f"front matter keys kept in chunk metadata, not filterable (not field names, or nested values): "
                f"{', '.join(stored[:8])}"
                + (f" and {len(stored) - 8} more" if len(stored) > 8 else "")
                + "; `race index --infer-schema` writes a schema to rename them in"
            )
    return corpus, skipped


def corpus_embedder(corpus_path: Path, embedder: Embedder | None) -> Embedder | None:
    """The embedder a build of ``corpus_path`` embeds with: the folder its schema names
    (``embedder``; relative to the schema file's folder), which an embedder given must equal;
    else the one given; else ``None`` (the bundled MiniLM)."""
    from backends.ingest.schema import load_schema, schema_path
    from backends.models.folder import FolderEmbedder

    declared = load_schema(corpus_path).embedder
    where = schema_path(corpus_path)
    if declared is None or where is None:
        return embedder
    folder = Path(declared.path).expanduser()
    try:
        named = FolderEmbedder(
            folder if folder.is_absolute() else where.parent / folder,
            name=declared.name,
            query_prompt=declared.query_prompt,
            document_prompt=declared.document_prompt,
        )
        identity = named.identity if embedder is not None else None
    except InputError as exc:
        raise InputError(f"field 'embedder.path': {exc}", where=str(where)) from exc
    if embedder is not None and identity is not None and embedder.identity != identity:
        # An embedder given by the caller (Ray's actors run MiniLM) must be the one the schema names.
        raise InputError(
            f"the schema names {identity.describe()}; this build embeds with {embedder.identity.describe()}",
            where=str(where),
        )
    return embedder or named


def start_staging(out: Path, *, copy: bool = False) -> Path:
    """The sibling directory an index is built in (``.NAME.building-PID``), after removing what
    killed builds left; with ``copy``, holding a copy of the index at ``out`` to update."""
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", where=str(out))
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).exists():
        raise InputError("is a non-empty directory that is not a RACE index; refusing to overwrite", where=str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    clear_dead_builds(out)
    staging = out.with_name(f".{out.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    if copy:
        try:
            shutil.copytree(out, staging, symlinks=True, copy_function=copy_file)
        except (OSError, shutil.Error, CopyFailed) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise disk_error(exc, out, staging, "copy the index to update it") or exc from None
    else:
        staging.mkdir()
    return staging


def finish_staging(staging: Path, out: Path, corpus: Corpus, generations: dict[str, str], skipped: str | None) -> None:
    """Write the manifest, schema and document digests, calibrate, and move the index in place
    of ``out``: ``out`` holds either the old index or the new one, never a part of one."""
    manifest = {
        "schema_version": INDEX_SCHEMA_VERSION,
        "corpus_revision": corpus.revision,
        "chunks": len(corpus.chunks),
        "documents": len(corpus.doc_ids),
        "edges": len(corpus.edges),
        "backends": sorted(generations),
        # Where the cited files live: receipts carry it, so `race verify` and `race context` find them.
        "corpus_root": str(Path(corpus.root).resolve()),
        # The code that wrote the contracts, facts and calibration below (race.indexing.provenance).
        "build_code": build_code_digest(),
    }
    if skipped is not None:
        manifest["vectors_skipped"] = skipped
    if corpus.ingest is not None:
        manifest["files"] = {"indexed": corpus.ingest.indexed, "skipped": corpus.ingest.counts()}
        (staging / INGEST).write_text(canonical_pretty(corpus.ingest) + "\n")
    (staging / SCHEMA).write_text(schema_document(corpus.corpus_schema))
    (staging / DOCUMENTS).write_text(json.dumps(document_digests(corpus), indent=0, sort_keys=True) + "\n")
    # The approximate contracts' recall, measured on the table just built (docs/invariants.md#calibrated-approximation).
    from race.indexing.calibration import calibrate_index

    calibrate_index(staging)
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    previous = out.with_name(f".{out.name}.previous-{os.getpid()}")
    if out.exists():
        out.rename(previous)
    staging.rename(out)
    shutil.rmtree(previous, ignore_errors=True)


def document_digests(corpus: Corpus) -> dict[str, str]:
    """Each document's fingerprint over its chunks (text, spans, metadata, source hash): an
    update re-indexes exactly the documents whose fingerprint changed."""
    chunks: dict[str, list[object]] = {}
    for chunk in corpus.chunks:
        chunks.setdefault(chunk.doc_id, []).append(chunk.model_dump(mode="json"))
    return {doc_id: fingerprint(rows) for doc_id, rows in sorted(chunks.items())}


def vectors_skipped(*, vectors: bool, embedder: Embedder | None, model_installed: bool) -> str | None:
    """Why an index is built without its vector index, or ``None`` when it gets one."""
    from backends.models.embedding import INSTALL_HINT, MINILM_NAME

    if not vectors:
        return f"vectors skipped (--no-vectors): no embedding model {MINILM_NAME} was used"
    if embedder is None and not model_installed:
        return f"the embedding model {MINILM_NAME} is not installed (install it with `{INSTALL_HINT}`)"
    return None


def absent_contracts(index_dir: Path) -> tuple[tuple[Contract, str], ...]:
    """The vector contracts an index lacks, each with the reason its manifest records."""
    from backends import shipped_contracts

    reason = read_manifest(index_dir).get("vectors_skipped")
    if not isinstance(reason, str):
        return ()
    return tuple((c, f"not in this index: {reason}") for c in shipped_contracts() if c.backend == "lancedb")


def read_manifest(index_dir: Path) -> dict[str, object]:
    path = index_dir / MANIFEST
    if not index_dir.is_dir():
        raise IndexMissingError(
            "index directory does not exist (build one with `race index CORPUS --out DIR`)", where=str(index_dir)
        )
    if not path.exists():
        raise IndexMissingError(f"no {MANIFEST}: not a RACE index directory", where=str(index_dir))
    from rsc.canonical import read_json

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IndexMissingError(f"unreadable: {exc.strerror or exc}", where=str(path)) from None
    # Truncated, not UTF-8 or not JSON: one bad-input line naming the file.
    data = read_json(raw, where=str(path), error=IndexMissingError)
    if not isinstance(data, dict) or data.get("schema_version") != INDEX_SCHEMA_VERSION:
        raise IndexMissingError(f"{MANIFEST} has an unknown schema_version", where=str(index_dir))
    return data


def corpus_root(index_dir: Path) -> str | None:
    """The absolute path of the corpus (folder or JSONL file) the index was built from, as its
    manifest records it; ``None`` for an index built before manifests recorded it."""
    root = read_manifest(index_dir).get("corpus_root")
    return root if isinstance(root, str) else None


def read_ingest(index_dir: Path) -> Ingest | None:
    """How the index's folder corpus was read, file by file; ``None`` for a JSONL corpus or an
    index built before files were accounted for."""
    from backends.ingest.files import Ingest

    path = index_dir / INGEST
    if not path.is_file():
        return None
    return Ingest.model_validate_json(path.read_bytes())


def read_index_schema(index_dir: Path) -> CorpusSchema | None:
    """The corpus schema an index was built under; ``None`` for an index built before schemas."""
    path = index_dir / SCHEMA
    if not path.is_file():
        return None
    return parse_schema(path.read_bytes(), where=str(path))


def check_plan_filters(plan: LogicalPlan, adapters: Iterable[Adapter], *, where: str) -> None:
    """Every filter of the plan whose value does not fit its field's type, in the corpus schema
    the adapters' index was built under, is bad input; so is a caller's query vector from an
    embedder no backend of the engine has (``check_query_vectors``)."""
    check_query_vectors(plan, adapters, where=where)
    schema = next((a.corpus_schema for a in adapters if a.corpus_schema is not None), None)
    if schema is None:
        return
    for ob in plan.obligations:
        for flt in (*ob.hard_filters, *ob.soft_filters):
            check_filter(schema, flt, where=f"{where}: obligation {ob.id}")
    for op in plan.operators:
        for flt in getattr(op, "filters", ()):
            check_filter(schema, flt, where=f"{where}: operator {op.id}")


def check_query_vectors(plan: LogicalPlan, adapters: Iterable[Adapter], *, where: str) -> None:
    """A query vector is compared only with vectors of its own embedder: one whose embedder is
    none of the engine's backends' is bad input naming both sides. (A leg whose backend has
    another embedder than the vector's refuses it when it runs, as its ``backend_error`` gap.)"""
    carried = [ob for ob in plan.obligations if ob.query.embedder is not None]
    if not carried:
        return
    from rsc import EmbedderIdentity

    known = sorted(
        {EmbedderIdentity.model_validate(m) for a in adapters for m in a.models()}, key=lambda i: (i.name, i.dims)
    )
    for ob in carried:
        if ob.query.embedder not in known:
            assert ob.query.embedder is not None
            have = "; ".join(i.describe() for i in known) or "none (no vector index)"
            raise InputError(
                f"query.embedder {ob.query.embedder.describe()} is not the embedder of any vector index here "
                f"(they are: {have})",
                where=f"{where}: obligation {ob.id}",
            )


def index_contracts(index_dir: Path) -> tuple[Contract, ...]:
    """The contracts generated for every backend of an index (the shipped ones of a backend whose
    index predates generated contracts), sorted by id and version."""
    from backends import shipped_contracts
    from backends.generated import read_contracts

    built = read_manifest(index_dir).get("backends", [])
    found: list[Contract] = []
    for backend in sorted(built) if isinstance(built, list) else ():
        generated = read_contracts(index_dir / str(backend))
        found += generated if generated is not None else [c for c in shipped_contracts() if c.backend == backend]
    return tuple(sorted(found, key=lambda c: (c.rsc_id, c.version)))
