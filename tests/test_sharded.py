"""Sharded instances (``backends.sharding.sharded``): scatter to every shard, exact top-k merge, and a
``shard_unavailable`` gap with the covered fraction for a shard that does not answer.

The shards are real tantivy indexes and LanceDB tables built from the documents each shard
holds in ``fixtures/sharded/instances.json``; the references are direct scans of an unsharded
index over the same documents (vectors), of each shard's own index (per-shard BM25) and of an
index over the surviving shards' documents (a killed shard). The licenses in
/usr/share/common-licenses are real text nobody on the project wrote.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from backends import Adapter, load_corpus
from backends.ingest.corpus import Corpus
from backends.lancedb import LanceAdapter
from backends.models.embedding import FloatArray, MiniLMEmbedder
from backends.sharding.sharded import ShardedAdapter
from backends.tantivy import TantivyAdapter
from planner import render_text
from race.engine import Engine
from rsc import (
    Contract,
    CoverageClaim,
    Filter,
    GapKind,
    Hit,
    IndexMissingError,
    InputError,
    ObligationStatus,
    Query,
    ScanRequest,
    ScanResult,
    SearchCoverage,
    fingerprint,
)
from tests.conftest import FIXTURES, remove_live_tree
from tests.faults.injector import FaultyAdapter, hang_async, nth_call, raise_task, truncated_custody
from tests.scan_requests import request_for

SPEC: dict[str, Any] = json.loads((FIXTURES / "sharded" / "instances.json").read_text())
LICENSES = Path(SPEC["licenses"]["directory"])

pytestmark = pytest.mark.anyio


# -- building shards ---------------------------------------------------------------------------


def _part(corpus: Corpus, docs: Sequence[str], tag: str) -> Corpus:
    keep = set(docs)
    chunks = tuple(c for c in corpus.chunks if c.doc_id in keep)
    assert {c.doc_id for c in chunks} == keep, f"{tag}: documents missing from the corpus"
    return corpus.model_copy(update={"chunks": chunks, "edges": (), "revision": fingerprint([corpus.revision, tag])})


class _MemoMiniLM(MiniLMEmbedder):
    """MiniLM, each text embedded once: the unsharded, shard and survivor tables share vectors."""

    def __init__(self) -> None:
        super().__init__()
        self._memo: dict[str, FloatArray] = {}

    def embed(self, texts: Sequence[str]) -> FloatArray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for text, vector in zip(missing, super().embed(missing), strict=True):
                self._memo[text] = vector
        return np.stack([self._memo[t] for t in texts]) if texts else super().embed(texts)


def _build(kind: type[Adapter], corpus: Corpus, out: Path, **kw: Any) -> Path:
    kind.build(corpus, out, **kw)
    return out


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    spec = SPEC["bm25"]
    corpus = load_corpus(FIXTURES / spec["corpus"])
    root = tmp_path_factory.mktemp("sharded-bm25")
    dirs = {
        label: _build(TantivyAdapter, _part(corpus, docs, label), root / label)
        for label, docs in spec["shards"].items()
    }
    dirs["full"] = _build(TantivyAdapter, corpus, root / "full")
    return dirs


@pytest.fixture(scope="module")
def licenses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    spec = SPEC["licenses"]
    names = [n for docs in spec["shards"].values() for n in docs]
    if not all((LICENSES / n).is_file() for n in names):
        pytest.skip(f"{LICENSES} lacks the licenses the fixture names")
    root = tmp_path_factory.mktemp("sharded-licenses")
    jsonl = root / "licenses.jsonl"
    records = [{"id": n, "title": n, "text": (LICENSES / n).read_text(errors="replace")} for n in sorted(names)]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    corpus = load_corpus(jsonl)
    dirs = {
        label: _build(TantivyAdapter, _part(corpus, docs, label), root / label)
        for label, docs in spec["shards"].items()
    }
    dirs["full"] = _build(TantivyAdapter, corpus, root / "full")
    return dirs


@pytest.fixture(scope="module")
def vectors(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], _MemoMiniLM]:
    spec = SPEC["vectors"]
    corpus = _part(load_corpus(FIXTURES / spec["corpus"]), spec["documents"], "vectors")
    embedder = _MemoMiniLM()
    root = tmp_path_factory.mktemp("sharded-vectors")
    dirs = {"full": _build(LanceAdapter, corpus, root / "full", embedder=embedder)}
    for label, docs in spec["shards"].items():
        dirs[label] = _build(LanceAdapter, _part(corpus, docs, label), root / label, embedder=embedder)
    survivors = [d for label, docs in spec["shards"].items() if label != SPEC["killed"] for d in docs]
    dirs["survivors"] = _build(
        LanceAdapter, _part(corpus, survivors, "survivors"), root / "survivors", embedder=embedder
    )
    return dirs, embedder


def _tantivy(dirs: dict[str, Path], labels: Sequence[str]) -> list[Adapter]:
    return [TantivyAdapter.open(dirs[label]) for label in labels]


def _lance(found: tuple[dict[str, Path], _MemoMiniLM], labels: Sequence[str]) -> list[Adapter]:
    dirs, embedder = found
    return [LanceAdapter.open(dirs[label], embedder=embedder) for label in labels]


# -- scanning directly -------------------------------------------------------------------------


def _request(contract: Contract, text: str, k: int, filters: Sequence[Filter] = ()) -> ScanRequest:
    return request_for(contract, text, k, pushed=tuple(filters))


def _contract(adapter: Adapter, rsc_id: str) -> Contract:
    return next(c for c in adapter.index_contracts() if c.rsc_id == rsc_id)


async def _scan(adapter: Adapter, rsc_id: str, text: str, k: int, filters: Sequence[Filter] = ()) -> tuple[Hit, ...]:
    result = await adapter.scan(_request(_contract(adapter, rsc_id), text, k, filters))
    assert not result.gaps, result.gaps
    return result.hits


def _ranked(hits: Sequence[Hit]) -> list[tuple[str, float]]:
    return [(h.key, float(h.custody.score)) for h in hits]


def _best_first(pairs: list[tuple[str, float]], k: int, *, distance: bool) -> list[tuple[str, float]]:
    """The reference merge: the score order of the kind, ties by evidence key."""
    return sorted(pairs, key=lambda p: (p[1] if distance else -p[1], p[0]))[:k]


FILTERS = [()] + [(Filter.model_validate(f),) for f in SPEC["bm25"]["filters"]]


# -- contracts, generations, bad input -----------------------------------------------------------


def test_contracts_name_the_instance_and_say_bm25_is_per_shard(bm25: dict[str, Path]) -> None:
    shards = _tantivy(bm25, ["s0", "s1", "s2"])
    sharded = ShardedAdapter("shards", shards)
    ids = sorted(c.rsc_id for c in sharded.index_contracts())
    assert ids == sorted(f"shards.{c.rsc_id}" for c in shards[0].index_contracts())
    assert all(c.backend == "shards" for c in sharded.index_contracts())
    assert "per-shard BM25" in _contract(sharded, "shards.tantivy.bm25").description
    # Each shard's generation, read directly, is in the instance's (and so in every fingerprint).
    generation = sharded.generation()
    for label, shard in zip(("s0", "s1", "s2"), shards, strict=True):
        assert f"{label}={shard.generation()}" in generation
    assert sharded.statistics().rows == TantivyAdapter.open(bm25["full"]).statistics().rows
    full_counts = TantivyAdapter.open(bm25["full"]).statistics().value_counts
    assert sharded.statistics().value_counts == full_counts
    # Named after its kind, the instance stands in for that backend under the kind's own ids.
    stand_in = ShardedAdapter("tantivy", shards)
    assert [c.rsc_id for c in stand_in.index_contracts()] == [c.rsc_id for c in shards[0].index_contracts()]
    assert all(c.backend == "tantivy" for c in stand_in.index_contracts())


def test_bad_input_names_the_instance(bm25: dict[str, Path], tmp_path: Path) -> None:
    shards = _tantivy(bm25, ["s0", "s1"])
    with pytest.raises(InputError, match="instance 'Bad-Name'"):
        ShardedAdapter("Bad-Name", shards)
    with pytest.raises(InputError, match="labels"):
        ShardedAdapter("shards", shards, labels=["a", "a"])
    with pytest.raises(InputError, match="at least one shard"):
        ShardedAdapter("shards", [])
    # A shard directory without an index at open is the catalog's mistake: bad input naming it.
    missing = tmp_path / "no-such-shard"
    with pytest.raises(IndexMissingError, match=str(missing)):
        ShardedAdapter.open_dirs("shards", TantivyAdapter, [bm25["s0"], missing])


# -- exact merges ----------------------------------------------------------------------------------


@pytest.mark.parametrize("filters", FILTERS, ids=["all", "filtered"])
async def test_bm25_merge_is_the_exact_top_k_of_the_per_shard_scores(
    bm25: dict[str, Path], filters: tuple[Filter, ...]
) -> None:
    labels = list(SPEC["bm25"]["shards"])
    sharded = ShardedAdapter("shards", _tantivy(bm25, labels))
    full = TantivyAdapter.open(bm25["full"])
    k = SPEC["bm25"]["k"]
    for text in SPEC["bm25"]["queries"]:
        got = await _scan(sharded, "shards.tantivy.bm25", text, k, filters)
        # Reference: each shard's own index scanned directly, its top-k merged by score then key.
        own = [
            p for shard in _tantivy(bm25, labels) for p in _ranked(await _scan(shard, "tantivy.bm25", text, k, filters))
        ]
        assert _ranked(got) == _best_first(own, k, distance=False), text
        assert [h.custody.rank for h in got] == list(range(1, len(got) + 1))
        # Read to the end, the instance finds exactly the chunks one unsharded index matches.
        every = await _scan(sharded, "shards.tantivy.bm25", text, 1000, filters)
        assert {h.key for h in every} == {h.key for h in await _scan(full, "tantivy.bm25", text, 1000, filters)}
        assert _ranked(every)[:k] == _ranked(got)


async def test_one_shard_instance_answers_exactly_as_its_index(bm25: dict[str, Path]) -> None:
    sharded = ShardedAdapter("one", _tantivy(bm25, ["full"]))
    full = TantivyAdapter.open(bm25["full"])
    for text in SPEC["bm25"]["queries"]:
        got = await _scan(sharded, "one.tantivy.bm25", text, 7)
        assert _ranked(got) == _ranked(await _scan(full, "tantivy.bm25", text, 7))
        assert all(h.custody.backend == "one" and h.custody.rsc == "one.tantivy.bm25@1.0.0" for h in got)


async def test_licenses_real_text_merge(licenses: dict[str, Path]) -> None:
    labels = list(SPEC["licenses"]["shards"])
    sharded = ShardedAdapter("licenses", _tantivy(licenses, labels), labels=labels)
    k = SPEC["licenses"]["k"]
    full = TantivyAdapter.open(licenses["full"])
    for text in SPEC["licenses"]["queries"]:
        got = await _scan(sharded, "licenses.tantivy.bm25", text, k)
        own = [p for shard in _tantivy(licenses, labels) for p in _ranked(await _scan(shard, "tantivy.bm25", text, k))]
        assert len(got) == k
        assert _ranked(got) == _best_first(own, k, distance=False), text
        every = await _scan(sharded, "licenses.tantivy.bm25", text, 5000)
        assert {h.key for h in every} == {h.key for h in await _scan(full, "tantivy.bm25", text, 5000)}
        assert {h.custody.index_identity.split(":", 1)[0] for h in got} <= {f"licenses/{lb}" for lb in labels}


def _exact_vector_contracts(adapter: Adapter) -> list[str]:
    return sorted(c.rsc_id for c in adapter.index_contracts() if c.coverage.claim is CoverageClaim.EXHAUSTIVE_TOPK)


async def test_exact_vector_merge_equals_one_unsharded_table(vectors: tuple[dict[str, Path], _MemoMiniLM]) -> None:
    labels = list(SPEC["vectors"]["shards"])
    sharded = ShardedAdapter("vecs", _lance(vectors, labels))
    full = _lance(vectors, ["full"])[0]
    contracts = _exact_vector_contracts(full)
    assert contracts, "the LanceDB index serves no exact contract"
    k = SPEC["vectors"]["k"]
    filters = [()] + [(Filter.model_validate(f),) for f in SPEC["vectors"]["filters"]]
    for rsc_id, text, flt in itertools.product(contracts, SPEC["vectors"]["queries"], filters):
        got = await _scan(sharded, f"vecs.{rsc_id}", text, k, flt)
        want = await _scan(full, rsc_id, text, k, flt)
        assert [h.key for h in got] == [h.key for h in want], (rsc_id, text, flt)
        assert [h.custody.score for h in got] == [h.custody.score for h in want]


# -- a shard killed mid-query --------------------------------------------------------------------


class _Gate:
    """Which shards have started and finished their scans, for ordering them by events."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._started: dict[int, anyio.Event] = {}
        self._done: dict[int, anyio.Event] = {}

    def started(self, i: int) -> anyio.Event:
        return self._started.setdefault(i, anyio.Event())

    def done(self, i: int) -> anyio.Event:
        return self._done.setdefault(i, anyio.Event())


class _Ordered(FaultyAdapter):
    """A real shard that answers only after the shards named in ``after`` have; ``killed``:
    it starts, waits until every other shard has answered, and dies mid-query."""

    def __init__(self, inner: Adapter, gate: _Gate, i: int, *, after: Sequence[int] = (), killed: bool = False):
        super().__init__(inner=inner)
        self.generated_contracts = inner.index_contracts()
        self.gate, self.i, self.after, self.killed = gate, i, tuple(after), killed

    async def scan(self, request: ScanRequest) -> ScanResult:
        self.gate.started(self.i).set()
        try:
            if self.killed:
                for j in range(self.gate.n):
                    if j != self.i:
                        await self.gate.done(j).wait()
                raise ConnectionResetError("shard process killed mid-query")
            for j in self.after:
                await self.gate.done(j).wait()
            return await self.inner.scan(request)
        finally:
            self.gate.done(self.i).set()


def _plan(text: str, k: int, *, allow: str, query_class: str = "lexical", leg_ms: int | None = None) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [
            {
                "id": "o",
                "kind": "seek_support",
                "query": {"text": text},
                "query_class": query_class,
                "k": k,
                "allow_contracts": [allow],
            }
        ],
    }
    if leg_ms is not None:
        plan["budget"] = {"leg_timeout_ms": leg_ms, "deadline_ms": max(2 * leg_ms, 10_000)}
    return plan


def _rows(spec: dict[str, Any], labels: Sequence[str]) -> int:
    """Chunks of the named shards, counted from the corpus itself."""
    corpus = load_corpus(FIXTURES / spec["corpus"])
    docs = {d for label in labels for d in spec["shards"][label]}
    return sum(1 for c in corpus.chunks if c.doc_id in docs)


def _check_partial(receipt: Any, killed: str, cause: GapKind, fraction: float) -> None:
    (ob,) = receipt.obligations
    assert ob.status is ObligationStatus.PARTIAL
    assert ob.search_coverage is SearchCoverage.PARTIAL_BACKEND
    assert receipt.coverage.search_coverage is SearchCoverage.PARTIAL_BACKEND
    unavailable = [g for g in ob.gaps if g.kind is GapKind.SHARD_UNAVAILABLE]
    assert len(unavailable) == 1
    assert f"shard {killed} " in unavailable[0].detail
    assert unavailable[0].covered_fraction == pytest.approx(fraction, abs=1e-12)
    assert any(g.kind is cause and f"shard {killed}:" in g.detail for g in ob.gaps)
    assert any(g.kind is GapKind.SHARD_UNAVAILABLE for g in receipt.gaps)


async def test_killed_bm25_shard_gives_the_survivors_exact_top_k(bm25: dict[str, Path]) -> None:
    spec = SPEC["bm25"]
    labels, killed = list(spec["shards"]), SPEC["killed"]
    gate = _Gate(len(labels))
    shards = [
        _Ordered(a, gate, i, killed=lb == killed)
        for i, (lb, a) in enumerate(zip(labels, _tantivy(bm25, labels), strict=True))
    ]
    engine = Engine({"shards": ShardedAdapter("shards", shards)})
    survivors = [lb for lb in labels if lb != killed]
    fraction = _rows(spec, survivors) / _rows(spec, labels)
    for text in spec["queries"]:
        receipt = await engine.run(_plan(text, spec["k"], allow="shards.tantivy.bm25"))
        _check_partial(receipt, killed, GapKind.BACKEND_ERROR, fraction)
        own = [p for s in _tantivy(bm25, survivors) for p in _ranked(await _scan(s, "tantivy.bm25", text, spec["k"]))]
        assert [(e.key, float(e.hits[0].custody.score)) for e in receipt.evidence] == _best_first(
            own, spec["k"], distance=False
        )


async def test_killed_vector_shard_equals_an_index_of_the_survivors(
    vectors: tuple[dict[str, Path], _MemoMiniLM],
) -> None:
    spec = SPEC["vectors"]
    labels, killed = list(spec["shards"]), SPEC["killed"]
    gate = _Gate(len(labels))
    shards = [
        _Ordered(a, gate, i, killed=lb == killed)
        for i, (lb, a) in enumerate(zip(labels, _lance(vectors, labels), strict=True))
    ]
    engine = Engine({"vecs": ShardedAdapter("vecs", shards)})
    survivors = _lance(vectors, ["survivors"])[0]
    fraction = _rows(spec, [lb for lb in labels if lb != killed]) / _rows(spec, labels)
    for text in spec["queries"]:
        # Each shard embeds the query cold at its first scan: deadlines are not the question here.
        plan = _plan(text, spec["k"], allow="vecs.lancedb.exact_matrix", query_class="conceptual", leg_ms=120_000)
        receipt = await engine.run(plan)
        _check_partial(receipt, killed, GapKind.BACKEND_ERROR, fraction)
        want = await _scan(survivors, "lancedb.exact_matrix", text, spec["k"])
        assert [e.key for e in receipt.evidence] == [h.key for h in want]
        got_scores = [float(e.hits[0].custody.score) for e in receipt.evidence]
        assert got_scores == [float(h.custody.score) for h in want]


async def test_hung_shard_times_out_within_the_leg_and_the_rest_is_merged(bm25: dict[str, Path]) -> None:
    spec = SPEC["bm25"]
    labels, killed = list(spec["shards"]), SPEC["killed"]
    shards = _tantivy(bm25, labels)
    i = labels.index(killed)
    hung = FaultyAdapter(inner=shards[i], faults={"o": hang_async()})
    hung.generated_contracts = shards[i].index_contracts()
    shards[i] = hung
    engine = Engine({"shards": ShardedAdapter("shards", shards)})
    text = spec["queries"][1]
    receipt = await engine.run(_plan(text, spec["k"], allow="shards.tantivy.bm25", leg_ms=1500))
    survivors = [lb for lb in labels if lb != killed]
    _check_partial(receipt, killed, GapKind.TIMEOUT, _rows(spec, survivors) / _rows(spec, labels))
    assert [inj.fault for inj in hung.injected] == ["hang_async"]
    own = [p for s in _tantivy(bm25, survivors) for p in _ranked(await _scan(s, "tantivy.bm25", text, spec["k"]))]
    assert [e.key for e in receipt.evidence] == [key for key, _ in _best_first(own, spec["k"], distance=False)]


async def test_shard_removed_after_open_is_unavailable_not_a_crash(bm25: dict[str, Path], tmp_path: Path) -> None:
    spec = SPEC["bm25"]
    labels, killed = list(spec["shards"]), SPEC["killed"]
    dirs = {lb: tmp_path / lb for lb in labels}
    for lb in labels:
        shutil.copytree(bm25[lb], dirs[lb])
    engine = Engine({"shards": ShardedAdapter.open_dirs("shards", TantivyAdapter, [dirs[lb] for lb in labels])})
    remove_live_tree(dirs[killed])
    text = spec["queries"][0]
    receipt = await engine.run(_plan(text, spec["k"], allow="shards.tantivy.bm25"))
    survivors = [lb for lb in labels if lb != killed]
    _check_partial(receipt, killed, GapKind.SNAPSHOT_MOVED, _rows(spec, survivors) / _rows(spec, labels))
    assert f"{killed}=unknown" in receipt.fingerprints.backends["shards"]
    own = [p for s in _tantivy(bm25, survivors) for p in _ranked(await _scan(s, "tantivy.bm25", text, spec["k"]))]
    assert [e.key for e in receipt.evidence] == [key for key, _ in _best_first(own, spec["k"], distance=False)]


# -- determinism and explain ---------------------------------------------------------------------


async def test_healthy_receipts_are_byte_identical_over_every_completion_order(bm25: dict[str, Path]) -> None:
    spec = SPEC["bm25"]
    labels = list(spec["shards"])
    text = spec["queries"][0]
    plan = _plan(text, spec["k"], allow="shards.tantivy.bm25")
    plain = await Engine({"shards": ShardedAdapter("shards", _tantivy(bm25, labels))}).run(plan)
    assert plain.obligations[0].status is ObligationStatus.SATISFIED
    assert not plain.obligations[0].gaps
    seen = set()
    for order in itertools.permutations(range(len(labels))):
        gate = _Gate(len(labels))
        # The shard at position p of ``order`` answers only after those before it have.
        after = {shard: order[:p] for p, shard in enumerate(order)}
        shards = [_Ordered(a, gate, i, after=after[i]) for i, a in enumerate(_tantivy(bm25, labels))]
        receipt = await Engine({"shards": ShardedAdapter("shards", shards)}).run(plan)
        seen.add(receipt.normalized_bytes())
    assert seen == {plain.normalized_bytes()}


def test_explain_shows_the_scatter_with_each_shard_generation(bm25: dict[str, Path]) -> None:
    labels = list(SPEC["bm25"]["shards"])
    shards = _tantivy(bm25, labels)
    engine = Engine({"shards": ShardedAdapter("shards", shards)})
    text = render_text(engine.plan_sync(_plan("ack timeout", 5, allow="shards.tantivy.bm25")))
    for label, shard in zip(labels, shards, strict=True):
        assert f"{label}={shard.generation()}" in text
    assert "scatter to 3 shards" in text


async def test_a_partial_answer_is_not_cached_and_a_recovered_shard_answers_in_full(bm25: dict[str, Path]) -> None:
    spec = SPEC["bm25"]
    labels, killed = list(spec["shards"]), SPEC["killed"]
    shards = _tantivy(bm25, labels)
    i = labels.index(killed)
    flaky = FaultyAdapter(
        inner=shards[i], faults={"o": nth_call(1, raise_task(ConnectionResetError("shard restarting")))}
    )
    flaky.generated_contracts = shards[i].index_contracts()
    shards[i] = flaky
    engine = Engine({"shards": ShardedAdapter("shards", shards)})
    plan = _plan(spec["queries"][0], spec["k"], allow="shards.tantivy.bm25")
    first, second = await engine.run(plan), await engine.run(plan)
    assert first.obligations[0].status is ObligationStatus.PARTIAL
    assert second.obligations[0].status is ObligationStatus.SATISFIED
    assert not second.gaps
    whole = await Engine({"shards": ShardedAdapter("shards", _tantivy(bm25, labels))}).run(plan)
    assert second.normalized_bytes() == whole.normalized_bytes()


async def test_a_shard_hit_whose_custody_names_another_request_is_dropped_not_relabelled(
    bm25: dict[str, Path],
) -> None:
    spec = SPEC["bm25"]
    labels = list(spec["shards"])
    shards = _tantivy(bm25, labels)
    bad = FaultyAdapter(inner=shards[0], faults={"o": truncated_custody()})
    bad.generated_contracts = shards[0].index_contracts()
    sharded = ShardedAdapter("shards", [bad, *shards[1:]])
    text = spec["queries"][0]
    result = await sharded.scan(_request(_contract(sharded, "shards.tantivy.bm25"), text, spec["k"]))
    (injected,) = bad.injected
    assert injected.key not in {h.key for h in result.hits}
    assert [g.kind for g in result.gaps] == [GapKind.BACKEND_ERROR]
    assert "shard s0: dropped 1 hit whose custody does not name its request" in result.gaps[0].detail
    # What is left is the exact merge of every other hit.
    own = [p for s in _tantivy(bm25, labels) for p in _ranked(await _scan(s, "tantivy.bm25", text, spec["k"]))]
    want = [p for p in _best_first(own, len(own), distance=False) if p[0] != injected.key][: spec["k"]]
    assert _ranked(result.hits) == want


async def test_a_shard_that_moved_after_planning_is_refused_alone(bm25: dict[str, Path], tmp_path: Path) -> None:
    spec = SPEC["bm25"]
    labels, moved = list(spec["shards"]), SPEC["killed"]
    dirs = {lb: tmp_path / lb for lb in labels}
    for lb in labels:
        shutil.copytree(bm25[lb], dirs[lb])
    sharded = ShardedAdapter.open_dirs("shards", TantivyAdapter, [dirs[lb] for lb in labels])
    planned = sharded.generation()
    # The shard is rebuilt in place after the plan was made: a new index, a new generation.
    corpus = load_corpus(FIXTURES / spec["corpus"])
    TantivyAdapter.build(_part(corpus, spec["shards"][moved], moved), dirs[moved])
    assert sharded.generation() != planned
    held = await sharded.pin(planned)
    text = spec["queries"][0]
    result = await held.scan(_request(_contract(held, "shards.tantivy.bm25"), text, spec["k"]))
    assert result.generation == planned
    kinds = sorted(g.kind.value for g in result.gaps)
    assert kinds == ["shard_unavailable", "snapshot_moved"]
    assert all(f"shard {moved}" in g.detail for g in result.gaps)
    survivors = [lb for lb in labels if lb != moved]
    own = [p for s in _tantivy(bm25, survivors) for p in _ranked(await _scan(s, "tantivy.bm25", text, spec["k"]))]
    assert _ranked(result.hits) == _best_first(own, spec["k"], distance=False)
    # Every hit carries the planned generation, which names the shard's it came from.
    planned_of = dict(zip(labels, sharded.shard_generations(planned) or (), strict=True))
    for hit in result.hits:
        label = hit.custody.index_identity.split(":", 1)[0].split("/", 1)[1]
        assert hit.custody.index_generation == planned
        assert f"{label}={planned_of[label]}" in planned


@pytest.mark.parametrize("early_stop", [True, False], ids=["early-stop", "full"])
async def test_score_sum_union_over_sharded_vectors_equals_one_table(
    vectors: tuple[dict[str, Path], _MemoMiniLM], early_stop: bool
) -> None:
    """A union fused by score sum reads its inputs by sorted and random access (Fagin's threshold
    algorithm): through the scatter, every depth and every random access answers what one
    table answers, so the fused evidence is the same."""
    plan = json.loads((FIXTURES / "plans" / "early_stop_union.json").read_text())
    # Each shard embeds the query and scores cold at its first scan: deadlines are not the question here.
    plan["budget"] = {"deadline_ms": 300_000, "leg_timeout_ms": 120_000}
    labels = list(SPEC["vectors"]["shards"])
    sharded = Engine({"lancedb": ShardedAdapter("lancedb", _lance(vectors, labels))}, early_stop=early_stop)
    single = Engine({"lancedb": _lance(vectors, ["full"])[0]}, early_stop=early_stop)
    got, want = await sharded.run(plan), await single.run(plan)

    def evidence(receipt: Any) -> list[tuple[Any, ...]]:
        return [
            (e.key, e.rank, e.status, e.fusion.method, e.fusion.score, tuple(sorted(e.fusion.similarities.items())))
            for e in receipt.evidence
        ]

    assert all(o.status is ObligationStatus.SATISFIED for o in want.obligations)
    assert all(o.status is ObligationStatus.SATISFIED for o in want.operators)
    assert evidence(got) == evidence(want)
    assert evidence(got)
    assert [(o.id, o.status, o.search_coverage) for o in got.obligations] == [
        (o.id, o.status, o.search_coverage) for o in want.obligations
    ]
    assert [(o.id, o.status, o.early_stop) for o in got.operators] == [
        (o.id, o.status, o.early_stop) for o in want.operators
    ]


async def test_vector_shards_embed_a_query_once_for_the_instance(vectors: tuple[dict[str, Path], _MemoMiniLM]) -> None:
    labels = list(SPEC["vectors"]["shards"])
    shards = _lance(vectors, labels)
    sharded = ShardedAdapter("vecs", shards)
    contract = _contract(sharded, "vecs.lancedb.exact_matrix")
    text = "a query no other test asks: which component owns the lease clock"
    first = await sharded.scan(_request(contract, text, 3))
    again = await sharded.scan(_request(contract, text, 3))
    # One model call for the three shards, none for the same text again (I10).
    assert (first.model_calls, again.model_calls) == (1, 0)
    assert _ranked(first.hits) == _ranked(again.hits)
    # Unshared, each shard embeds the query itself.
    alone = _lance(vectors, labels)
    calls = [(await s.scan(_request(_contract(s, "lancedb.exact_matrix"), text, 3))).model_calls for s in alone]
    assert calls == [1, 1, 1]


@pytest.mark.parametrize("k", [20, 1000])
async def test_exact_lookup_across_shards_is_the_whole_set_in_key_order_and_a_cut_is_a_gap(
    bm25: dict[str, Path], k: int
) -> None:
    labels = list(SPEC["bm25"]["shards"])
    sharded = ShardedAdapter("shards", _tantivy(bm25, labels))
    full = TantivyAdapter.open(bm25["full"])
    ids = tuple(sorted({d for docs in SPEC["bm25"]["shards"].values() for d in docs}))
    mine, theirs = _contract(sharded, "shards.tantivy.exact"), _contract(full, "tantivy.exact")
    got = await sharded.scan(_request(mine, "ids", k).model_copy(update={"query": Query(ids=ids)}))
    want = await full.scan(_request(theirs, "ids", k).model_copy(update={"query": Query(ids=ids)}))
    assert [h.key for h in got.hits] == [h.key for h in want.hits] == sorted(h.key for h in want.hits)
    assert got.total_matches == want.total_matches
    limited = [g for g in got.gaps if g.kind is GapKind.RESOURCE_LIMITED and "shard " not in g.detail]
    if want.total_matches is not None and want.total_matches > k:
        assert [g.kind for g in want.gaps] == [GapKind.RESOURCE_LIMITED]
        assert len(limited) == 1 and f"matched {want.total_matches} chunks; k={k} returned {k}" in limited[0].detail
    else:
        assert not want.gaps and not got.gaps


async def test_no_shard_answering_fails_the_leg_as_one_backend_would(bm25: dict[str, Path]) -> None:
    labels = list(SPEC["bm25"]["shards"])
    shards: list[Adapter] = []
    for i, shard in enumerate(_tantivy(bm25, labels)):
        down = FaultyAdapter(inner=shard, faults={"o": raise_task(ConnectionResetError(f"shard {i} down"))})
        down.generated_contracts = shard.index_contracts()
        shards.append(down)
    engine = Engine({"shards": ShardedAdapter("shards", shards)})
    receipt = await engine.run(_plan(SPEC["bm25"]["queries"][0], 5, allow="shards.tantivy.bm25"))
    (ob,) = receipt.obligations
    assert ob.status is ObligationStatus.UNSATISFIED
    assert not receipt.evidence
    (failure,) = [g for g in ob.gaps if g.kind is GapKind.BACKEND_ERROR]
    assert all(f"shard {lb}: ConnectionResetError: shard {i} down" in failure.detail for i, lb in enumerate(labels))
