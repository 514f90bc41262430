"""The graph backend: exact structural answers, bounds, lineage and generations."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

import backends.graph
from backends.base import custody_hit
from backends.graph import GraphAdapter
from backends.ingest.corpus import EDGE_RELATIONS, METADATA_FIELDS, Corpus, load_corpus
from rsc import (
    BackendUnavailable,
    CoverageClaim,
    Filter,
    FilterOp,
    FilterSupportClass,
    GapKind,
    GraphPattern,
    InputError,
    Query,
    ScanRequest,
    ScanResult,
    ScoreKind,
    SearchCoverage,
)

pytestmark = pytest.mark.anyio

FIXTURE_CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
MODES = {"graph.identity": "graph_identity", "graph.neighbors": "graph_neighbors", "graph.traverse": "graph_khop"}

DOCS: dict[str, dict[str, str]] = {
    "adr-1": {"doc_type": "adr", "date": "2023-01-10", "status": "superseded"},
    "adr-2": {"doc_type": "adr", "date": "2024-05-02", "status": "accepted"},
    "guide-1": {"doc_type": "guide", "date": "2023-03-01"},
    "guide-2": {"doc_type": "guide", "date": "2024-06-01"},
    "origin-x": {"doc_type": "advisory", "date": "2024-01-01"},
    "post-a": {"doc_type": "blog", "date": "2024-01-05"},
    "post-b": {"doc_type": "mail", "date": "2024-01-06"},
    "post-c": {"doc_type": "blog", "date": "2024-02-01"},
}
EDGES: list[tuple[str, str, str]] = [
    ("adr-2", "adr-1", "supersedes"),
    ("guide-1", "adr-1", "cites"),
    ("guide-2", "adr-2", "cites"),
    ("guide-2", "adr-1", "cites"),
    ("post-a", "origin-x", "derived_from"),
    ("post-b", "origin-x", "derived_from"),
    ("post-c", "entity:fsync", "mentions"),
    ("adr-1", "entity:fsync", "mentions"),
    ("entity:app", "entity:lib-a", "depends_on"),
    ("entity:lib-a", "entity:lib-b", "depends_on"),
    ("entity:lib-b", "entity:lib-c", "depends_on"),
    ("entity:app", "entity:lib-d", "depends_on"),
    ("entity:lib-d", "entity:lib-c", "depends_on"),
    ("entity:lib-c", "entity:lib-e", "depends_on"),
    ("guide-1", "entity:app", "mentions"),
]


def write_corpus(
    root: Path, edges: list[tuple[str, str, str]] = EDGES, docs: dict[str, dict[str, str]] = DOCS
) -> Corpus:
    (root / "docs").mkdir(parents=True, exist_ok=True)
    for doc_id, meta in docs.items():
        front = "".join(f"{k}: {v}\n" for k, v in meta.items())
        body = f"# {doc_id}\n\n## Summary\nAbout {doc_id}.\n\n## Details\nMore on {doc_id}.\n"
        (root / "docs" / f"{doc_id}.md").write_text(f"---\nid: {doc_id}\n{front}---\n{body}")
    lines = [json.dumps({"src": s, "dst": d, "relation": r}) for s, d, r in edges]
    (root / "edges.jsonl").write_text("".join(line + "\n" for line in lines))
    return load_corpus(root)


@pytest.fixture
def adapter(tmp_path: Path) -> GraphAdapter:
    corpus = write_corpus(tmp_path / "corpus")
    GraphAdapter.build(corpus, tmp_path / "index")
    return GraphAdapter.open(tmp_path / "index")


def request(
    rsc_id: str,
    *,
    ids: tuple[str, ...] = (),
    entities: tuple[str, ...] = (),
    pattern: GraphPattern | None = None,
    k: int = 100,
    pushed: tuple[Filter, ...] = (),
) -> ScanRequest:
    return ScanRequest(
        obligation="o1",
        rsc_id=rsc_id,
        rsc_version="1.0.0",
        backend="graph",
        mode=MODES[rsc_id],
        query=Query(ids=ids, entities=entities, pattern=pattern),
        k=k,
        pushed=pushed,
    )


def reached(result: ScanResult) -> dict[str, int]:
    return {hit.doc_id: int(hit.custody.score) for hit in result.hits}


def check_order(result: ScanResult) -> None:
    order = [(hit.custody.score, hit.doc_id) for hit in result.hits]
    assert order == sorted(order)
    assert [hit.custody.rank for hit in result.hits] == list(range(1, len(result.hits) + 1))
    assert all(hit.custody.score_kind is ScoreKind.HOPS for hit in result.hits)


def oracle(graph: Any, seeds: list[str], relations: set[str] | None, direction: str, depth: int) -> dict[str, int]:
    """Independent answer: networkx's shortest path lengths on the relation-filtered view."""
    view = nx.subgraph_view(graph, filter_edge=lambda u, v, key: relations is None or key in relations)
    if direction == "in":
        view = view.reverse(copy=False)
    elif direction == "both":
        view = view.to_undirected(as_view=True)
    best: dict[str, int] = {}
    for seed in seeds:
        for node, hops in nx.single_source_shortest_path_length(view, seed, cutoff=depth).items():
            best[node] = min(hops, best.get(node, hops))
    return {node: hops for node, hops in best.items() if node not in seeds}


def test_public_face_and_contracts() -> None:
    assert backends.graph.__all__ == ["GraphAdapter"]
    contracts = GraphAdapter.contracts()
    assert [c.rsc_id for c in contracts] == sorted(MODES)
    for contract in contracts:
        assert contract.backend == "graph" and contract.mode == MODES[contract.rsc_id]
        assert contract.coverage.claim is CoverageClaim.EXHAUSTIVE_SET
        assert contract.coverage.best_reach() is SearchCoverage.BOUNDED_STRUCTURAL
        assert contract.score_kind is ScoreKind.HOPS and contract.ordering == "hops_asc"
        assert contract.model_calls == 0 and contract.egress.value == "local"
        assert set(contract.filters) == {"doc_id", *METADATA_FIELDS}
        assert all(s.support is FilterSupportClass.NATIVE_PREFILTER_EXACT for s in contract.filters.values())
        assert "never match a metadata filter" in contract.description


def test_statistics_count_nodes_and_document_metadata(adapter: GraphAdapter) -> None:
    stats = adapter.statistics()
    assert stats.backend == "graph" and stats.rows == adapter.graph.number_of_nodes()
    assert stats.value_counts["doc_type"] == {"adr": 2, "advisory": 1, "blog": 2, "guide": 2, "mail": 1}


async def test_dependency_query_is_exact_with_no_model_call(adapter: GraphAdapter) -> None:
    pattern = GraphPattern(relations=("depends_on",), depth=8)
    result = await adapter.scan(request("graph.traverse", entities=("app",), pattern=pattern))
    assert result.model_calls == 0
    assert reached(result) == {
        "entity:lib-a": 1,
        "entity:lib-d": 1,
        "entity:lib-b": 2,
        "entity:lib-c": 2,
        "entity:lib-e": 3,
    }
    assert reached(result) == oracle(adapter.graph, ["entity:app"], {"depends_on"}, "out", 8)
    assert result.gaps == () and result.exhausted and result.total_matches == 5
    check_order(result)
    upstream = await adapter.scan(
        request(
            "graph.traverse",
            entities=("entity:lib-c",),
            pattern=GraphPattern(relations=("depends_on",), direction="in", depth=8),
        )
    )
    assert reached(upstream) == {"entity:lib-b": 1, "entity:lib-d": 1, "entity:lib-a": 2, "entity:app": 2}


@pytest.mark.parametrize("direction", ["out", "in", "both"])
async def test_traversal_matches_networkx_on_a_random_graph(tmp_path: Path, direction: str) -> None:
    rng = random.Random(11)
    docs = {f"d{i:03d}": {"doc_type": "adr"} for i in range(60)}
    nodes = [*docs, *(f"entity:e{i:02d}" for i in range(20))]
    edges = sorted({(rng.choice(nodes), rng.choice(nodes), rng.choice(EDGE_RELATIONS)) for _ in range(200)})
    edges = [e for e in edges if e[0] != e[1]]
    corpus = write_corpus(tmp_path / "corpus", edges=edges, docs=docs)
    GraphAdapter.build(corpus, tmp_path / "index")
    graph_adapter = GraphAdapter.open(tmp_path / "index")
    for relations in ((), ("cites", "depends_on")):
        for depth in (1, 2, 3):
            seeds = ["d000", "d007", "entity:e03"]
            pattern = GraphPattern(relations=relations, direction=direction, depth=depth)
            result = await graph_adapter.scan(request("graph.traverse", ids=tuple(seeds), pattern=pattern, k=10_000))
            expected = oracle(graph_adapter.graph, seeds, set(relations) or None, direction, depth)
            assert reached(result) == expected
            check_order(result)


async def test_neighbours_by_relation_and_direction(adapter: GraphAdapter) -> None:
    citing = await adapter.scan(
        request("graph.neighbors", ids=("adr-1",), pattern=GraphPattern(relations=("cites",), direction="in"))
    )
    assert reached(citing) == {"guide-1": 1, "guide-2": 1}
    cited = await adapter.scan(
        request(
            "graph.neighbors", ids=("guide-2",), pattern=GraphPattern(relations=("cites",), direction="out", depth=3)
        )
    )
    assert reached(cited) == {"adr-1": 1, "adr-2": 1}, "neighbours are one hop whatever the depth"
    around = await adapter.scan(request("graph.neighbors", ids=("adr-1",), pattern=GraphPattern(direction="both")))
    assert reached(around) == {"adr-2": 1, "guide-1": 1, "guide-2": 1, "entity:fsync": 1}
    assert [h.key for h in around.hits] == ["doc:adr-2", "entity:fsync", "doc:guide-1", "doc:guide-2"]


async def test_identity_lookup(adapter: GraphAdapter, tmp_path: Path) -> None:
    result = await adapter.scan(request("graph.identity", ids=("adr-2", "nope", "guide-1#1"), entities=("fsync",)))
    assert [h.key for h in result.hits] == ["doc:adr-2", "entity:fsync", "doc:guide-1"]
    assert all(h.custody.score == 0 for h in result.hits) and result.gaps == ()
    entity = result.hits[1]
    edge_lines = (tmp_path / "corpus" / "edges.jsonl").read_text().splitlines()
    assert entity.custody.source_path == "edges.jsonl" and entity.metadata == {}
    assert entity.custody.line_start == entity.custody.line_end == 7
    assert "entity:fsync" in edge_lines[entity.custody.line_start - 1]
    assert entity.custody.source_hash.startswith("sha256:")


async def test_document_hit_custody_equals_the_shared_helper(adapter: GraphAdapter, tmp_path: Path) -> None:
    corpus = load_corpus(tmp_path / "corpus")
    req = request("graph.identity", ids=("adr-2",))
    hit = (await adapter.scan(req)).hits[0]
    first = next(c for c in corpus.chunks if c.doc_id == "adr-2")
    expected = custody_hit(
        request=req,
        contract_ref="graph.identity@1.0.0",
        chunk=first.model_dump(),
        rank=1,
        score=0.0,
        score_kind=ScoreKind.HOPS,
        index_identity=adapter.identity,
        generation=adapter.generation(),
        corpus_revision=corpus.revision,
        key="doc:adr-2",
    )
    assert hit == expected


async def test_node_budget_gives_a_resource_limited_gap(adapter: GraphAdapter) -> None:
    pattern = GraphPattern(relations=("depends_on",), depth=8, node_budget=4)
    result = await adapter.scan(request("graph.traverse", entities=("app",), pattern=pattern))
    [gap] = result.gaps
    assert gap.kind is GapKind.RESOURCE_LIMITED and gap.backend == "graph"
    assert "visiting 4 nodes" in gap.detail and "depth 1 of 8 complete" in gap.detail
    assert reached(result) == {"entity:lib-a": 1, "entity:lib-d": 1}, "only complete depths are returned"
    assert not result.exhausted


async def test_depth_bound_with_frontier_left_is_not_a_gap(adapter: GraphAdapter) -> None:
    pattern = GraphPattern(relations=("depends_on",), depth=1)
    result = await adapter.scan(request("graph.traverse", entities=("app",), pattern=pattern))
    assert reached(result) == {"entity:lib-a": 1, "entity:lib-d": 1}
    assert result.gaps == () and result.exhausted


async def test_k_cut_is_reported(adapter: GraphAdapter) -> None:
    pattern = GraphPattern(relations=("depends_on",), depth=8)
    result = await adapter.scan(request("graph.traverse", entities=("app",), pattern=pattern, k=2))
    assert len(result.hits) == 2 and result.total_matches == 5 and not result.exhausted
    assert [g.kind for g in result.gaps] == [GapKind.RESOURCE_LIMITED]


async def test_unknown_seed_is_said(adapter: GraphAdapter) -> None:
    result = await adapter.scan(request("graph.traverse", ids=("no-such-doc",), pattern=GraphPattern(depth=2)))
    assert result.hits == ()
    [gap] = result.gaps
    assert gap.kind is GapKind.MISSING_EVIDENCE and "no-such-doc" in gap.detail


async def test_metadata_filters_apply_to_documents_only(adapter: GraphAdapter) -> None:
    pattern = GraphPattern(direction="both", depth=2)
    unfiltered = await adapter.scan(request("graph.traverse", ids=("adr-1",), pattern=pattern))
    assert "entity:fsync" in reached(unfiltered)
    guides = Filter(field="doc_type", op=FilterOp.EQ, value="guide")
    result = await adapter.scan(request("graph.traverse", ids=("adr-1",), pattern=pattern, pushed=(guides,)))
    assert reached(result) == {"guide-1": 1, "guide-2": 1}
    assert result.hits[0].custody.filters_pushed == ("doc_type = 'guide'",)
    recent = Filter(field="date", op=FilterOp.RANGE, gte="2024-01-01")
    dated = await adapter.scan(request("graph.traverse", ids=("adr-1",), pattern=pattern, pushed=(recent,)))
    assert reached(dated) == {"adr-2": 1, "guide-2": 1, "post-c": 2}
    with pytest.raises(BackendUnavailable):
        await adapter.scan(
            request("graph.traverse", ids=("adr-1",), pushed=(Filter(field="version", op=FilterOp.RANGE, gte="1"),))
        )


async def test_bad_requests_fail_loudly(adapter: GraphAdapter) -> None:
    with pytest.raises(InputError):
        await adapter.scan(request("graph.traverse", ids=("adr-1",), pattern=GraphPattern(relations=("likes",))))
    wrong = request("graph.traverse", ids=("adr-1",)).model_copy(update={"mode": "bm25"})
    with pytest.raises(BackendUnavailable):
        await adapter.scan(wrong)


def test_reposts_share_an_origin_and_independent_documents_do_not(adapter: GraphAdapter) -> None:
    origins = adapter.origins(["post-b", "post-a", "origin-x", "post-c", "guide-1", "unknown-doc"])
    assert list(origins) == sorted(origins)
    assert origins["post-a"] == origins["post-b"] == origins["origin-x"] == "origin-x"
    assert origins["post-c"] == "post-c" and origins["guide-1"] == "guide-1"
    assert len({origins["post-c"], origins["guide-1"]}) == 2
    assert origins["unknown-doc"] == "unknown-doc"


def test_origin_is_smallest_root_of_the_component(tmp_path: Path) -> None:
    docs = {d: {"doc_type": "blog"} for d in ("a-copy", "b-root", "c-root", "d-copy-of-copy")}
    edges = [
        ("a-copy", "c-root", "derived_from"),
        ("a-copy", "b-root", "derived_from"),
        ("d-copy-of-copy", "a-copy", "derived_from"),
    ]
    corpus = write_corpus(tmp_path / "corpus", edges=edges, docs=docs)
    GraphAdapter.build(corpus, tmp_path / "index")
    origins = GraphAdapter.open(tmp_path / "index").origins(list(docs))
    assert set(origins.values()) == {"b-root"}


def test_related_finds_documents_citing_a_superseded_adr(adapter: GraphAdapter) -> None:
    docs = sorted(DOCS)
    superseded = [d for d, by in adapter.related(docs, "supersedes", "in").items() if by]
    assert superseded == ["adr-1"]
    citing = adapter.related(superseded, "cites", "in")
    assert citing == {"adr-1": ("guide-1", "guide-2")}
    assert adapter.related(["guide-2", "nope"], "cites") == {"guide-2": ("adr-1", "adr-2"), "nope": ()}
    with pytest.raises(InputError):
        adapter.related(["adr-1"], "likes")


def test_generation_changes_with_an_edge_and_only_then(tmp_path: Path) -> None:
    first = GraphAdapter.build(write_corpus(tmp_path / "c1"), tmp_path / "i1")
    again = GraphAdapter.build(write_corpus(tmp_path / "c2"), tmp_path / "i2")
    assert first == again
    assert (tmp_path / "i1/graph/graph.json").read_bytes() == (tmp_path / "i2/graph/graph.json").read_bytes()
    lineage = GraphAdapter.open(tmp_path / "i1").source_dependence_generation()
    assert lineage == GraphAdapter.open(tmp_path / "i2").source_dependence_generation()

    cites_changed = [e if e != ("guide-2", "adr-1", "cites") else ("guide-2", "post-c", "cites") for e in EDGES]
    changed = GraphAdapter.build(write_corpus(tmp_path / "c3", edges=cites_changed), tmp_path / "i3")
    assert changed != first
    assert GraphAdapter.open(tmp_path / "i3").source_dependence_generation() == lineage

    copied = [*EDGES, ("post-c", "origin-x", "derived_from")]
    GraphAdapter.build(write_corpus(tmp_path / "c4", edges=copied), tmp_path / "i4")
    assert GraphAdapter.open(tmp_path / "i4").source_dependence_generation() != lineage


def test_open_sees_a_rebuilt_index(tmp_path: Path) -> None:
    GraphAdapter.build(write_corpus(tmp_path / "c1"), tmp_path / "index")
    opened = GraphAdapter.open(tmp_path / "index")
    before = opened.generation()
    newer = GraphAdapter.build(write_corpus(tmp_path / "c2", edges=EDGES[:-1]), tmp_path / "index")
    assert opened.generation() == newer != before


def test_a_tampered_index_is_refused(tmp_path: Path) -> None:
    GraphAdapter.build(write_corpus(tmp_path / "c"), tmp_path / "index")
    path = tmp_path / "index/graph/graph.json"
    path.write_text(path.read_text().replace('"cites"', '"depends_on"', 1))
    with pytest.raises(InputError, match="generation"):
        GraphAdapter.open(tmp_path / "index")
    with pytest.raises(InputError, match="no graph index"):
        GraphAdapter.open(tmp_path / "elsewhere")


async def test_from_graph_serves_an_in_memory_graph(adapter: GraphAdapter) -> None:
    copy = GraphAdapter.from_graph(adapter.graph, corpus_revision="copy")
    assert copy.generation() == adapter.generation()
    req = request("graph.traverse", ids=("adr-1",), pattern=GraphPattern(direction="both", depth=2))
    assert reached(await copy.scan(req)) == reached(await adapter.scan(req))
    with pytest.raises(ValueError, match="kind"):
        GraphAdapter.from_graph(nx.MultiDiGraph([("a", "b")], edges_source={"path": "e", "source_hash": "h"}))


@pytest.mark.skipif(not (FIXTURE_CORPUS / "edges.jsonl").exists(), reason="fixture corpus not written yet")
async def test_fixture_corpus(tmp_path: Path) -> None:
    corpus = load_corpus(FIXTURE_CORPUS)
    GraphAdapter.build(corpus, tmp_path / "index")
    graph_adapter = GraphAdapter.open(tmp_path / "index")
    lines = (FIXTURE_CORPUS / "edges.jsonl").read_text().splitlines()
    for src, dst, relation, line in graph_adapter.graph.edges(keys=True, data="line"):
        assert json.loads(lines[line - 1]) == {"src": src, "dst": dst, "relation": relation}
    facts = json.loads((FIXTURE_CORPUS / "facts.json").read_text())["scenarios"]
    for scenario in facts:
        if scenario["kind"] == "repost_origin":
            ids = [scenario["original"], *scenario["reposts"]]
            assert set(graph_adapter.origins(ids).values()) == {scenario["original"]}, scenario["name"]
        elif scenario["kind"] == "independent_origin":
            origins = graph_adapter.origins(scenario["origins"])
            assert len(set(origins.values())) == len(scenario["origins"]), scenario["name"]
        elif "dependency_chain" in scenario:
            # Who is exposed to the vulnerable library: everything that depends on it, transitively.
            chain = scenario["dependency_chain"]
            pattern = GraphPattern(relations=("depends_on",), direction="in", depth=8)
            result = await graph_adapter.scan(request("graph.traverse", entities=(chain[-1],), pattern=pattern))
            assert set(chain[:-1]) <= set(reached(result)), scenario["name"]
            assert reached(result) == oracle(graph_adapter.graph, [chain[-1]], {"depends_on"}, "in", 8)
            assert "entity:kestrel-go-client" not in reached(result)
