"""Shards reached through Ray actors (``backends.sharding.ray``), on a local cluster (2 CPUs)
started once for this module: the same receipts as local shards, a shard actor killed
mid-query is ``shard_unavailable`` with the covered fraction, and a missing index is bad input."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import ray  # the race[ray] extra, which `make` installs

from backends import Adapter, load_corpus
from backends.sharding.ray import RayShard
from backends.sharding.sharded import ShardedAdapter
from backends.tantivy import TantivyAdapter
from race.engine import Engine
from rsc import (
    GapKind,
    IndexMissingError,
    ObligationStatus,
    Query,
    ScanRequest,
    ScanResult,
    SearchCoverage,
    fingerprint,
)
from tests.conftest import FIXTURES, WrappedAdapter

SPEC: dict[str, Any] = json.loads((FIXTURES / "sharded" / "instances.json").read_text())["bm25"]
KILLED: str = json.loads((FIXTURES / "sharded" / "instances.json").read_text())["killed"]
LABELS = list(SPEC["shards"])

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Ray's socket paths must stay short, so its session files go under a fresh temp dir of ours.
    temp = tmp_path_factory.mktemp("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024, _temp_dir=str(temp))
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    corpus = load_corpus(FIXTURES / SPEC["corpus"])
    root = tmp_path_factory.mktemp("sharded-ray")
    out = {}
    for label, docs in SPEC["shards"].items():
        chunks = tuple(c for c in corpus.chunks if c.doc_id in set(docs))
        part = corpus.model_copy(
            update={"chunks": chunks, "edges": (), "revision": fingerprint([corpus.revision, label])}
        )
        TantivyAdapter.build(part, root / label)
        out[label] = root / label
    return out


def _plan(text: str) -> dict[str, Any]:
    ob = {"id": "o", "kind": "seek_support", "query": {"text": text}, "query_class": "lexical", "k": SPEC["k"]}
    return {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [{**ob, "allow_contracts": ["shards.tantivy.bm25"]}],
    }


async def test_ray_shards_give_the_receipts_of_local_shards(cluster: None, dirs: dict[str, Path]) -> None:
    remote = [RayShard(TantivyAdapter, dirs[lb]) for lb in LABELS]
    try:
        over_ray = Engine({"shards": ShardedAdapter("shards", remote)})
        local = Engine({"shards": ShardedAdapter("shards", [TantivyAdapter.open(dirs[lb]) for lb in LABELS])})
        for text in SPEC["queries"]:
            a, b = await over_ray.run(_plan(text)), await local.run(_plan(text))
            assert a.obligations[0].status is ObligationStatus.SATISFIED
            assert a.normalized_bytes() == b.normalized_bytes(), text
    finally:
        for shard in remote:
            shard.kill()


class _KilledMidQuery(WrappedAdapter):
    """A Ray shard whose actor is killed once every other shard of the instance has answered."""

    def __init__(self, inner: RayShard, others: list[RayShard]) -> None:
        super().__init__(inner)
        self.others = others
        self.generated_contracts = inner.index_contracts()
        self.corpus_schema = inner.corpus_schema

    async def scan(self, request: ScanRequest) -> ScanResult:
        for other in self.others:
            # The others' answers are in: what they scanned is done before this shard dies.
            await other.actor.generation.remote()
        self.inner.kill()
        await _dead(self.inner)
        return await self.inner.scan(request)


async def _dead(shard: RayShard) -> None:
    """Until the killed actor stops answering: ``ray.kill`` is delivered asynchronously, and a
    call sent at once may still be answered on a busy machine."""
    for _ in range(1200):
        try:
            await shard.actor.generation.remote()
        except ray.exceptions.RayActorError:
            return
        await anyio.sleep(0.05)
    raise AssertionError("the killed shard actor still answers after 60 s")


async def test_a_killed_shard_actor_is_shard_unavailable_with_the_covered_fraction(
    cluster: None, dirs: dict[str, Path]
) -> None:
    remote = {lb: RayShard(TantivyAdapter, dirs[lb]) for lb in LABELS}
    survivors = [lb for lb in LABELS if lb != KILLED]
    shards: list[Adapter] = [
        _KilledMidQuery(remote[lb], [remote[s] for s in survivors]) if lb == KILLED else remote[lb] for lb in LABELS
    ]
    try:
        engine = Engine({"shards": ShardedAdapter("shards", shards)})
        text = SPEC["queries"][0]
        receipt = await engine.run(_plan(text))
        (ob,) = receipt.obligations
        assert ob.status is ObligationStatus.PARTIAL
        assert ob.search_coverage is SearchCoverage.PARTIAL_BACKEND
        (gap,) = [g for g in ob.gaps if g.kind is GapKind.SHARD_UNAVAILABLE]
        corpus = load_corpus(FIXTURES / SPEC["corpus"])
        rows = {lb: sum(1 for c in corpus.chunks if c.doc_id in set(SPEC["shards"][lb])) for lb in LABELS}
        assert gap.covered_fraction == pytest.approx(sum(rows[s] for s in survivors) / sum(rows.values()), abs=1e-12)
        assert any(g.kind is GapKind.BACKEND_ERROR and "actor died" in g.detail for g in ob.gaps)
        # The survivors' exact merge, against their indexes scanned directly here.
        own = []
        for lb in survivors:
            adapter = TantivyAdapter.open(dirs[lb])
            request = ScanRequest(
                obligation="o",
                rsc_id="tantivy.bm25",
                rsc_version="1.0.0",
                backend="tantivy",
                mode="bm25",
                query=Query(text=text),
                k=SPEC["k"],
            )
            own += [(h.key, float(h.custody.score)) for h in (await adapter.scan(request)).hits]
        want = sorted(own, key=lambda p: (-p[1], p[0]))[: SPEC["k"]]
        assert [(e.key, float(e.hits[0].custody.score)) for e in receipt.evidence] == want
    finally:
        for shard in remote.values():
            shard.kill()


def test_a_missing_index_in_the_actor_is_bad_input_naming_it(cluster: None, tmp_path: Path) -> None:
    with pytest.raises(IndexMissingError, match=str(tmp_path / "nothing")):
        RayShard(TantivyAdapter, tmp_path / "nothing")
