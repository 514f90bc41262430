"""The graph adapter: exact structural answers over documents, entities and typed edges.

It serves three contracts (``rsc/*.json`` beside this package): node identity, one-hop
neighbours by relation and direction, and bounded k-hop traversal. Every answer is the
exact set of nodes within the walk's bound, ordered by hop count then node id, with no
model call. A walk that meets its node budget stops and says so in a ``resource_limited``
gap (I17). For the runtime, not the planner, it also answers source-dependence questions:
the origin component of each document (I13) and one-relation joins.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from backends.base import (
    UNKNOWN_GENERATION,
    Adapter,
    Progress,
    RefusedSnapshot,
    blocking,
    load_contracts_beside,
)
from backends.generated import generate_contracts, read_contracts, write_contracts
from backends.graph.hits import _HitMaker
from backends.graph.store import (
    DOCUMENT,
    ENTITY_PREFIX,
    GRAPH_FILE,
    _Snapshot,
    check_graph,
    generation_of,
    graph_from_corpus,
    read_graph,
    read_schema,
    write_graph,
    write_schema,
)
from backends.graph.traverse import Direction, Reach, bounded_reach
from backends.ingest.schema import EDGE_RELATIONS, METADATA_FIELDS
from rsc import (
    BackendStatistics,
    BackendUnavailable,
    Contract,
    Gap,
    GapKind,
    GapSeverity,
    GraphPattern,
    IndexMissingError,
    InputError,
    ScanRequest,
    ScanResult,
)

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus

_log = logging.getLogger(__name__)

_DIRECTIONS: tuple[Direction, ...] = ("out", "in", "both")


def _stamp(path: Path | str) -> tuple[int, int, int]:
    stat = os.stat(path)
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class GraphAdapter(Adapter):
    backend = "graph"

    def __init__(self, snapshot: _Snapshot, *, path: Path | None = None) -> None:
        self._snapshot = snapshot
        # A str, not a Path: stat() on it skips a conversion on every generation read.
        self._path = str(path) if path is not None else None
        self._reload_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return _CONTRACTS

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        graph = graph_from_corpus(corpus, progress)
        folder = index_dir / cls.backend
        write_schema(folder, corpus.corpus_schema)
        write_contracts(folder, generate_contracts(cls.contracts(), corpus.corpus_schema))
        return write_graph(graph, folder, corpus_revision=corpus.revision)

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        started = time.perf_counter()
        path = index_dir / cls.backend / GRAPH_FILE
        stamp = _stamp(path) if path.is_file() else None
        graph, generation, revision = read_graph(path)
        adapter = cls(_Snapshot(graph, generation, revision, stamp), path=path)
        adapter.generated_contracts = read_contracts(path.parent)
        adapter.corpus_schema = read_schema(path.parent)
        ms, nodes = (time.perf_counter() - started) * 1e3, graph.number_of_nodes()
        _log.debug("graph %s read in %.1f ms: %d nodes, %d edges", path, ms, nodes, graph.number_of_edges())
        return adapter

    @classmethod
    def from_graph(cls, graph: Any, *, corpus_revision: str = "in-memory") -> Self:
        """An adapter over a graph already in memory, laid out as ``backends.graph.store`` says.

        The graph is used as is, not copied: mutating it afterwards leaves the generation stale.
        """
        check_graph(graph)
        return cls(_Snapshot(graph, generation_of(graph), corpus_revision, None))

    @property
    def identity(self) -> str:
        return self._snapshot.identity

    @property
    def graph(self) -> Any:
        """The networkx graph of the current snapshot (read-only by agreement), made on first use:
        scans read the snapshot's plain adjacency (``backends.graph.adjacency``) instead."""
        return self._current().networkx

    @property
    def reads_generation_inline(self) -> bool:
        return True  # a stat of graph.json

    @property
    def pins_inline(self) -> bool:
        return True  # that stat, and the snapshot already loaded

    def generation(self) -> str:
        """The generation of ``graph.json`` as it is now; a rebuilt file is loaded first."""
        return self._current().generation

    def pinned(self, generation: str) -> Adapter:
        """The loaded snapshot held for the run, when it is ``generation``: a file rewritten
        meanwhile is not read by the returned adapter (scans, origins, relations alike)."""
        try:
            snapshot = self._current()
        except (BackendUnavailable, IndexMissingError) as exc:
            reason = f"cannot be read ({exc})"
            return RefusedSnapshot(self, planned=generation, current=UNKNOWN_GENERATION, reason=reason)
        if snapshot.generation != generation:
            return RefusedSnapshot(
                self, planned=generation, current=snapshot.generation, reason="is no longer the graph's content"
            )
        held = copy.copy(self)
        # No file to follow: the held adapter answers from this snapshot only.
        held._snapshot, held._path = snapshot, None
        return held

    def _current(self) -> _Snapshot:
        snapshot = self._snapshot
        path = self._path
        if path is None:
            return snapshot
        try:
            stamp = _stamp(path)
        except FileNotFoundError as exc:
            raise BackendUnavailable("graph index file vanished after open", where=path) from exc
        if stamp == snapshot.stamp:
            return snapshot
        with self._reload_lock:
            if self._snapshot.stamp != stamp:
                graph, generation, revision = read_graph(Path(path))
                self._snapshot = _Snapshot(graph, generation, revision, stamp)
            return self._snapshot

    def statistics(self) -> BackendStatistics:
        graph = self._current().graph
        counts: dict[str, dict[str, int]] = {}
        for _, attrs in graph.nodes(data=True):
            if attrs["kind"] != DOCUMENT:
                continue
            for field in graph.graph.get("fields", METADATA_FIELDS):
                if field in attrs["metadata"]:
                    value = str(attrs["metadata"][field])
                    counts.setdefault(field, {}).setdefault(value, 0)
                    counts[field][value] += 1
        ordered = {f: dict(sorted(v.items())) for f, v in sorted(counts.items())}
        nodes = graph.number_of_nodes()
        # Edges per node in one direction: what a walk's expected reach grows by per hop.
        degree = {"mean_degree": round(graph.number_of_edges() / nodes, 6)} if nodes else {}
        return BackendStatistics(backend=self.backend, rows=nodes, value_counts=ordered, access=degree)

    # -- source dependence, for the runtime ---------------------------------------------------

    def origins(self, node_ids: Sequence[str]) -> dict[str, str]:
        """Each id -> the id of its origin component over ``derived_from`` edges (I13).

        Two documents with the same origin id are not independent sources. An id with no
        lineage edge, known or not, is its own origin: nothing says it was copied.
        """
        origins = self._current().origins
        return {node: origins.get(node, node) for node in sorted(set(node_ids))}

    def source_dependence_generation(self) -> str:
        """A fingerprint of the lineage subgraph: it changes exactly when ``origins`` can."""
        return self._current().lineage_generation

    def related(self, ids: Sequence[str], relation: str, direction: str = "out") -> dict[str, tuple[str, ...]]:
        """Each id -> the ids one ``relation`` edge away in ``direction`` (sorted); unknown ids map to ()."""
        graph = self._current().graph
        relations = _relations((relation,), graph, where="related")
        if direction not in _DIRECTIONS:
            raise InputError(f"direction must be one of {', '.join(_DIRECTIONS)}, not {direction!r}", where="related")
        out: dict[str, tuple[str, ...]] = {}
        for node in sorted(set(ids)):
            if node not in graph:
                out[node] = ()
                continue
            found = bounded_reach(
                graph, (node,), relations=relations, direction=direction, depth=1, node_budget=graph.number_of_nodes()
            )
            out[node] = found.layers[1] if len(found.layers) > 1 else ()
        return out

    # -- scans --------------------------------------------------------------------------------

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def scan_call(self, request: ScanRequest) -> Callable[[], ScanResult]:
        return partial(self._scan, request)

    def _scan(self, request: ScanRequest) -> ScanResult:
        # The index's own contracts: their filter tables are its schema's fields, not the shipped ones.
        contract = next((c for c in self.index_contracts() if c.rsc_id == request.rsc_id), None)
        if contract is None or contract.mode != request.mode or contract.version != request.rsc_version:
            raise BackendUnavailable(
                f"graph serves no {request.rsc_id}@{request.rsc_version} in mode {request.mode!r}", where=request.rsc_id
            )
        for flt in (*request.pushed, *request.residual):
            if not contract.applies(flt):
                raise BackendUnavailable(
                    f"filter {flt.describe()} is not supported by {contract.ref}", where=request.rsc_id
                )
        snapshot = self._current()
        graph = snapshot.graph
        seeds, unknown = _resolve(graph, (*request.query.ids, *request.query.entities))
        pattern = request.query.pattern or GraphPattern()
        gaps: list[Gap] = []
        if request.mode == "graph_identity":
            reach = Reach((tuple(sorted(seeds)),), 0, len(seeds), False)
            first_hop = 0
        else:
            depth = 1 if request.mode == "graph_neighbors" else pattern.depth
            relations = _relations(pattern.relations, graph, where=f"{request.obligation}.query.pattern.relations")
            reach = bounded_reach(
                graph,
                seeds,
                relations=relations,
                direction=pattern.direction,
                depth=depth,
                node_budget=pattern.node_budget,
            )
            first_hop = 1
            if unknown:
                gaps.append(
                    self.gap(
                        request,
                        GapKind.MISSING_EVIDENCE,
                        f"not in the graph, so not walked from: {', '.join(unknown)}",
                        GapSeverity.CAVEAT if seeds else GapSeverity.SHORTFALL,
                    )
                )
            if reach.budget_met:
                gaps.append(
                    self.gap(
                        request,
                        GapKind.RESOURCE_LIMITED,
                        (
                            f"node budget {pattern.node_budget} met after visiting {reach.visited} nodes; depth "
                            f"{reach.complete_depth} of {depth} complete, hits cover hops <= {reach.complete_depth}"
                        ),
                    )
                )
        filters = (*request.pushed, *request.residual)
        nodes = graph.nodes
        matched: list[tuple[int, str]] = []
        for hop in range(first_hop, len(reach.layers)):
            for node in reach.layers[hop]:
                # Entity nodes have no metadata, so any metadata filter excludes them.
                if filters and not all(f.matches(nodes[node].get("metadata", {})) for f in filters):
                    continue
                matched.append((hop, node))
        kept = matched[: request.k]
        if len(matched) > len(kept):
            gaps.append(
                self.gap(
                    request,
                    GapKind.RESOURCE_LIMITED,
                    f"{len(matched)} nodes matched; k={request.k} returned the {len(kept)} nearest",
                )
            )
        hits = _HitMaker(request, snapshot).hits(kept)
        return ScanResult(
            hits=hits,
            gaps=tuple(gaps),
            model_calls=0,
            generation=snapshot.generation,
            total_matches=len(matched),
            exhausted=len(kept) == len(matched) and not reach.budget_met,
        )


def _resolve(graph: Any, wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """Query ids and entities as graph nodes: a node id, an entity name without its
    ``entity:`` prefix, or a chunk id (``doc#n``) standing for its document."""
    found: set[str] = set()
    unknown: set[str] = set()
    for name in wanted:
        doc = name.rpartition("#")[0]
        if name in graph:
            found.add(name)
        elif ENTITY_PREFIX + name in graph:
            found.add(ENTITY_PREFIX + name)
        elif doc and doc in graph and name in graph.nodes[doc].get("chunks", ()):
            found.add(doc)
        else:
            unknown.add(name)
    return sorted(found), sorted(unknown)


def _relations(names: Sequence[str], graph: Any, *, where: str) -> frozenset[str] | None:
    known = tuple(graph.graph.get("relations", EDGE_RELATIONS))
    bad = sorted(set(names) - set(known))
    if bad:
        raise InputError(f"unknown relation {bad[0]!r}; relations are {', '.join(known)}", where=where)
    return frozenset(names) if names else None


_CONTRACTS: tuple[Contract, ...] = load_contracts_beside(__file__)
