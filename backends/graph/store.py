"""The graph index: its layout as a networkx MultiDiGraph, its file form, and its generations.

An index opens ``graph.json`` into an ``Adjacency`` (``backends.graph.adjacency``), the same
layout in plain dicts, without importing networkx; building and updating use networkx.

Layout. Document nodes are keyed by doc id and carry ``kind="document"``, the document's
``metadata``, its ``chunks`` (chunk ids in order) and the custody fields of its first
chunk (``title``, ``text``, ``source_path``, line and character span, ``source_hash``).
Every other edge endpoint is an entity node (``kind="entity"``) carrying ``line``, the
1-based line of the first edges-file line that mentions it, and ``text``, that line.
Edges are keyed by their relation, so one (src, dst, relation) triple is one edge, and
carry ``line``, their own edges-file line. ``graph.graph["edges_source"]`` names the edges
file (``path``, ``source_hash``) that entity custody points into.

File form. ``graph.json`` is canonical JSON (sorted keys, nodes sorted by id, edges by
(src, relation, dst)), written atomically, and carries the generation it was built with;
a file whose content does not hash to that generation is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.base import Progress
from backends.graph.adjacency import Adjacency, as_networkx
from backends.ingest.schema import EDGE_RELATIONS, CorpusSchema, RelationRole, default_schema
from rsc import IndexMissingError, canonical_json, fingerprint

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus

GRAPH_FILE = "graph.json"
SCHEMA_FILE = "schema.json"
"""The corpus schema beside the graph: which relations exist and which of them are lineage."""
GRAPH_SCHEMA_VERSION = "race.graph/1"
DOCUMENT = "document"
ENTITY = "entity"
ENTITY_PREFIX = "entity:"

LINEAGE_RELATIONS: tuple[str, ...] = ("derived_from",)
"""Relations that make one document a copy or derivative of another (source dependence).

``derived_from`` is the only copy-like relation the corpus vocabulary has; a repost,
translation or quotation relation would be added here, and then to the corpus."""

_DOCUMENT_FIELDS = ("title", "text", "source_path", "line_start", "line_end", "char_start", "char_end", "source_hash")


def graph_from_corpus(corpus: Corpus, progress: Progress | None = None) -> Any:
    """The MultiDiGraph of a corpus, with edge and entity custody pointing into its edges file."""
    import networkx as nx

    lines, source = _edge_lines(corpus)
    graph = nx.MultiDiGraph()
    graph.graph["edges_source"] = source
    _describe(graph, corpus.corpus_schema)
    first_chunks: dict[str, Any] = {}
    chunk_ids: dict[str, list[str]] = {}
    for chunk in corpus.chunks:
        first_chunks.setdefault(chunk.doc_id, chunk)
        chunk_ids.setdefault(chunk.doc_id, []).append(chunk.chunk_id)
    total = len(first_chunks) + len(corpus.edges)
    done = 0
    for doc_id in sorted(first_chunks):
        chunk = first_chunks[doc_id]
        graph.add_node(
            doc_id,
            kind=DOCUMENT,
            metadata=dict(chunk.metadata),
            chunks=tuple(chunk_ids[doc_id]),
            **{field: getattr(chunk, field) for field in _DOCUMENT_FIELDS},
        )
        done += 1
        if progress:
            progress(done, total)
    for edge in corpus.edges:
        line, text = lines[(edge.src, edge.dst, edge.relation)]
        for end in (edge.src, edge.dst):
            if end not in graph:
                graph.add_node(end, kind=ENTITY, line=line, text=text)
            elif graph.nodes[end]["kind"] == ENTITY and line < graph.nodes[end]["line"]:
                graph.nodes[end].update(line=line, text=text)
        graph.add_edge(edge.src, edge.dst, key=edge.relation, line=line)
        done += 1
        if progress:
            progress(done, total)
    return graph


def update_graph(graph: Any, corpus: Corpus, *, stale: Sequence[str], fresh: Sequence[str]) -> None:
    """Bring ``graph`` (read from an index) to ``corpus`` in place: the ``stale`` documents'
    nodes go, the ``fresh`` ones' come, the edges the corpus no longer has go and its new ones
    come, and every edge and entity takes its line in the corpus's edges file again. The result
    is ``graph_from_corpus(corpus)``, node for node and edge for edge."""
    lines, source = _edge_lines(corpus)
    graph.graph["edges_source"] = source
    _describe(graph, corpus.corpus_schema)
    for doc_id in stale:
        if doc_id in graph:
            graph.remove_node(doc_id)  # and its edges: the corpus's are added again below
    wanted = frozenset(fresh)
    first_chunks: dict[str, Any] = {}
    chunk_ids: dict[str, list[str]] = {}
    for chunk in corpus.chunks:
        if chunk.doc_id in wanted:
            first_chunks.setdefault(chunk.doc_id, chunk)
            chunk_ids.setdefault(chunk.doc_id, []).append(chunk.chunk_id)
    for doc_id in sorted(first_chunks):
        chunk = first_chunks[doc_id]
        attrs = {field: getattr(chunk, field) for field in _DOCUMENT_FIELDS}
        attrs.update(kind=DOCUMENT, metadata=dict(chunk.metadata), chunks=tuple(chunk_ids[doc_id]))
        if doc_id in graph:  # an entity until now: it keeps its edges
            graph.nodes[doc_id].clear()
            graph.nodes[doc_id].update(attrs)
        else:
            graph.add_node(doc_id, **attrs)
    for src, dst, key in list(graph.edges(keys=True)):
        if (src, dst, key) not in lines:
            graph.remove_edge(src, dst, key=key)
    for edge in corpus.edges:
        for end in (edge.src, edge.dst):
            if end not in graph:
                graph.add_node(end, kind=ENTITY)
        graph.add_edge(edge.src, edge.dst, key=edge.relation, line=lines[(edge.src, edge.dst, edge.relation)][0])
    for node in list(graph.nodes):
        if graph.nodes[node].get("kind") != ENTITY:
            continue
        touching = [
            lines[(s, d, k)] for s, d, k in (*graph.in_edges(node, keys=True), *graph.out_edges(node, keys=True))
        ]
        if not touching:
            graph.remove_node(node)
            continue
        line, text = min(touching)
        graph.nodes[node].clear()
        graph.nodes[node].update(kind=ENTITY, line=line, text=text)


def _edge_lines(corpus: Corpus) -> tuple[dict[tuple[str, str, str], tuple[int, str]], dict[str, str]]:
    """Each edge's first line and text in the corpus's edges file, and that file's name and hash.

    ``Corpus`` keeps edges sorted and without line numbers, so they are found again in the
    file the corpus was loaded from. A corpus made in memory, or one whose file no longer
    holds its edges, gets a virtual ``edges.jsonl``: its edges one per line in corpus order.
    """
    path = _edges_file(Path(corpus.root))
    wanted = {(e.src, e.dst, e.relation) for e in corpus.edges}
    if path is not None:
        data = path.read_bytes()
        found: dict[tuple[str, str, str], tuple[int, str]] = {}
        for lineno, line in enumerate(data.decode("utf-8").splitlines(), start=1):
            triple = _triple(line)
            if triple in wanted and triple not in found:
                found[triple] = (lineno, line.strip())
        if len(found) == len(wanted):
            return found, {"path": path.name, "source_hash": _sha256(data)}
    rendered = [json.dumps(e.model_dump(), sort_keys=True, ensure_ascii=False) for e in corpus.edges]
    virtual = {
        (e.src, e.dst, e.relation): (n, text) for n, (e, text) in enumerate(zip(corpus.edges, rendered, strict=True), 1)
    }
    data = "".join(t + "\n" for t in rendered).encode("utf-8")
    return virtual, {"path": "edges.jsonl", "source_hash": _sha256(data)}


def _edges_file(root: Path) -> Path | None:
    # Mirrors where backends.ingest.corpus.load_corpus looks for edges.
    if root.is_dir():
        candidates = [root / "edges.jsonl"]
    else:
        candidates = [root.with_name(root.stem + ".edges.jsonl"), root.parent / "edges.jsonl"]
    return next((p for p in candidates if p.is_file()), None)


def _triple(line: str) -> tuple[str, str, str] | None:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(raw, dict):
        return None
    return (str(raw.get("src")), str(raw.get("dst")), str(raw.get("relation")))


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _describe(graph: Any, schema: CorpusSchema) -> None:
    """Record the schema's relations and fields on the graph object (not its content: they
    are the schema's, which the index records beside the graph)."""
    graph.graph["relations"] = tuple(sorted(schema.relations))
    graph.graph["lineage_relations"] = schema.relations_with(RelationRole.DERIVED_FROM)
    graph.graph["fields"] = tuple(schema.filterable())


def write_schema(folder: Path, schema: CorpusSchema) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SCHEMA_FILE).write_text(schema.model_dump_json(indent=1) + "\n", encoding="utf-8")


def read_schema(folder: Path) -> CorpusSchema:
    path = folder / SCHEMA_FILE
    if not path.is_file():
        return default_schema()
    try:
        return CorpusSchema.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise IndexMissingError(f"unreadable corpus schema ({exc}); rebuild the index", where=str(path)) from exc


def check_graph(graph: Any) -> None:
    """Refuse a graph that does not follow the layout (used for graphs handed in from memory)."""
    import networkx as nx

    if not isinstance(graph, nx.MultiDiGraph | Adjacency):
        raise TypeError("the graph backend needs a networkx MultiDiGraph")
    source = graph.graph.get("edges_source")
    if not (
        isinstance(source, dict) and isinstance(source.get("path"), str) and isinstance(source.get("source_hash"), str)
    ):
        raise TypeError("graph.graph['edges_source'] must be {'path': str, 'source_hash': str}")
    for node, attrs in graph.nodes(data=True):
        kind = attrs.get("kind")
        if kind == DOCUMENT:
            missing = [f for f in ("metadata", "chunks", *_DOCUMENT_FIELDS) if f not in attrs]
        elif kind == ENTITY:
            missing = [f for f in ("line", "text") if f not in attrs]
        else:
            raise ValueError(f"node {node!r}: kind must be 'document' or 'entity', not {kind!r}")
        if missing:
            raise ValueError(f"node {node!r}: missing attributes {missing}")
    names = tuple(graph.graph.get("relations", EDGE_RELATIONS))
    relations = set(names)
    for src, dst, key in graph.edges(keys=True):
        if key not in relations:
            raise ValueError(f"edge {src!r} -> {dst!r}: key must be a relation of {names}, not {key!r}")


def content(graph: Any) -> dict[str, Any]:
    """The graph's content as JSON data, in canonical order: what the generation is of."""
    nodes = []
    for node in sorted(graph.nodes):
        attrs = graph.nodes[node]
        row: dict[str, Any] = {"id": node, **attrs}
        if "chunks" in row:
            row["chunks"] = list(row["chunks"])
        nodes.append(row)
    edges = sorted(
        (
            {"src": src, "dst": dst, "relation": key, "line": attrs.get("line", 0)}
            for src, dst, key, attrs in graph.edges(keys=True, data=True)
        ),
        key=lambda e: (e["src"], e["relation"], e["dst"]),
    )
    return {"edges_source": dict(graph.graph["edges_source"]), "nodes": nodes, "edges": edges}


def generation_of(graph: Any) -> str:
    return "graph:" + fingerprint(content(graph))


def lineage_edges(graph: Any) -> list[tuple[str, str, str]]:
    """The source-dependence subgraph as sorted (src, relation, dst) triples."""
    lineage = set(graph.graph.get("lineage_relations", LINEAGE_RELATIONS))
    return sorted((src, key, dst) for src, dst, key in graph.edges(keys=True) if key in lineage)


def origin_components(graph: Any) -> dict[str, str]:
    """Each node on a lineage edge -> the id of its origin component.

    Components are weakly connected over lineage edges: a document derived from two
    sources joins them, which can only lower a count of independent origins (I13). The
    component's id is its smallest root (a node with no outgoing lineage edge); a
    component that is all cycle has no root and falls back to its smallest member.
    """
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        root = node
        while parent[root] != root:
            root = parent[root]
        while parent[node] != root:
            parent[node], node = root, parent[node]
        return root

    has_out: set[str] = set()
    for src, _, dst in lineage_edges(graph):
        parent.setdefault(src, src)
        parent.setdefault(dst, dst)
        has_out.add(src)
        a, b = find(src), find(dst)
        if a != b:
            parent[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for node in sorted(parent):
        members.setdefault(find(node), []).append(node)
    origins: dict[str, str] = {}
    for group in members.values():
        roots = [n for n in group if n not in has_out]
        origin = roots[0] if roots else group[0]
        for node in group:
            origins[node] = origin
    return origins


def write_graph(graph: Any, folder: Path, *, corpus_revision: str) -> str:
    """Write ``folder/graph.json`` atomically and return the generation it records."""
    folder.mkdir(parents=True, exist_ok=True)
    body = content(graph)
    generation = "graph:" + fingerprint(body)
    document = {
        "schema_version": GRAPH_SCHEMA_VERSION,
        "corpus_revision": corpus_revision,
        "generation": generation,
        **body,
    }
    fd, tmp = tempfile.mkstemp(prefix=".graph-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(canonical_json(document))
        os.replace(tmp, folder / GRAPH_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return generation


def read_graph(path: Path) -> tuple[Adjacency, str, str]:
    """The graph in ``path`` (an ``Adjacency``), its generation and corpus revision; a bad file
    is an IndexMissingError."""
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise IndexMissingError("no graph index here (run `race index`)", where=str(path)) from exc
    except (OSError, ValueError) as exc:
        raise IndexMissingError(f"unreadable graph index ({exc}); rebuild it", where=str(path)) from exc
    if not isinstance(document, dict) or document.get("schema_version") != GRAPH_SCHEMA_VERSION:
        raise IndexMissingError(f"graph index is not {GRAPH_SCHEMA_VERSION}; rebuild it", where=str(path))
    graph = Adjacency()
    graph.graph["edges_source"] = document["edges_source"]
    _describe(graph, read_schema(path.parent))
    for row in document["nodes"]:
        attrs = {k: v for k, v in row.items() if k != "id"}
        if "chunks" in attrs:
            attrs["chunks"] = tuple(attrs["chunks"])
        graph.add_node(row["id"], **attrs)
    for e in document["edges"]:
        graph.add_edge(e["src"], e["dst"], e["relation"], line=e["line"])
    generation = generation_of(graph)
    if generation != document.get("generation"):
        raise IndexMissingError(
            "graph index content does not match its recorded generation; rebuild it", where=str(path)
        )
    return graph, generation, str(document.get("corpus_revision", ""))


class _Snapshot:
    """One loaded generation of the graph; scans hold one for their whole run."""

    def __init__(self, graph: Any, generation: str, corpus_revision: str, stamp: tuple[int, int, int] | None) -> None:
        self.graph = graph
        self.generation = generation
        self.corpus_revision = corpus_revision
        self.identity = f"graph:{corpus_revision}"
        self.stamp = stamp
        source = graph.graph["edges_source"]
        self.edges_path = str(source["path"])
        self.edges_hash = str(source["source_hash"])

    @cached_property
    def networkx(self) -> Any:
        """The graph as a networkx MultiDiGraph, made on first use (scans never need it)."""
        return as_networkx(self.graph)

    @cached_property
    def origins(self) -> dict[str, str]:
        return origin_components(self.graph)

    @cached_property
    def lineage_generation(self) -> str:
        return "graph-lineage:" + fingerprint([list(edge) for edge in lineage_edges(self.graph)])
