"""Milvus consistency levels as snapshot semantics, and partition keys as pushed filters, against
milvus-lite: each level's reads answer what a direct pymilvus call at that level answers, the
contract states the level, a read below Strong carries a ``weak_consistency`` caveat (Strong
none), a catalog instance declares its level; a collection whose schema has a partition key
answers an eq/in filter on it exactly as a float64 numpy reference over its rows does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import numpy as np
import pytest

from rsc import Filter, FilterOp, FilterSupportClass, GapKind, GapSeverity
from tests.backends.conftest import milvus_available
from tests.scan_requests import milvus_request as _request
from tests.scan_requests import scan_now as _scan

pytestmark = pytest.mark.skipif(not milvus_available(), reason="the race[milvus] extra is not installed")

TEXT = "the broker ran out of memory and was killed"
LEVELS = ("Strong", "Bounded", "Session", "Eventually")


def _incident_plan(**extra: Any) -> dict[str, Any]:
    """One conceptual obligation for the top 5 incidents about ``TEXT``."""
    ob = {
        "id": "collection",
        "kind": "seek_support",
        "query": {"text": TEXT},
        "query_class": "conceptual",
        "k": 5,
        "hard_filters": [{"field": "doc_type", "value": "incident"}],
        **extra,
    }
    return {"schema_version": "race.plan/1", "root": "collection", "obligations": [ob], "operators": []}


def _direct(adapter: Any, text: str, expr: str, k: int, level: str) -> list[str]:
    """The top-k chunk ids of a pymilvus search of the adapter's collection at ``level``, read
    to the end of the collection and ordered by (distance, id)."""
    from pymilvus import MilvusClient

    vector, _ = adapter._queries.vector(text)
    client = MilvusClient(adapter._uri)
    try:
        answer = client.search(
            adapter.collection,
            data=[np.asarray(vector, dtype=np.float32).tolist()],
            limit=1000,
            filter=expr,
            output_fields=["chunk_id"],
            search_params={"metric_type": "COSINE"},
            consistency_level=level,
        )
    finally:
        client.close()
    ranked = sorted((1.0 - float(h["distance"]), str(h["chunk_id"])) for h in answer[0])
    return [cid for _, cid in ranked[:k]]


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_reads_as_pymilvus_does_and_says_so(milvus_instances: dict[str, Any], level: str) -> None:
    from backends.milvus import MilvusAdapter
    from backends.milvus.consistency import FRESHNESS

    adapter = MilvusAdapter.open(milvus_instances["folders"]["FLAT"], consistency=level)
    try:
        assert adapter.consistency == level
        contract = adapter.index_contracts()[0]
        assert contract.snapshot.freshness == FRESHNESS[level]
        assert contract.description.count("Read at consistency level") == 1
        assert f"Read at consistency level {level}" in contract.description
        for filters, expr in (
            ((), ""),
            ((Filter(field="doc_type", value="incident"),), 'doc_type == "incident"'),
            (
                (Filter(field="component", op=FilterOp.IN, values=("storage", "network")),),
                'component in ["network", "storage"]',
            ),
        ):
            result = _scan(adapter, _request(adapter, TEXT, 10, filters))
            assert [h.chunk_id for h in result.hits] == _direct(adapter, TEXT, expr, 10, level), (level, filters)
            if level == "Strong":
                assert result.gaps == ()
            else:
                (gap,) = result.gaps
                assert gap.kind is GapKind.WEAK_CONSISTENCY and gap.severity is GapSeverity.CAVEAT
                assert level in gap.detail and "may be missing" in gap.detail
    finally:
        adapter.close()


def test_strong_contracts_are_the_ones_built(milvus_flat: Any) -> None:
    """Strong, the default, leaves the written contract as it was built."""
    from backends.generated import read_contracts

    assert milvus_flat.consistency == "Strong"
    assert milvus_flat.index_contracts() == read_contracts(milvus_flat.folder)


def test_a_catalog_instance_declares_its_level(
    index_dir: Path, milvus_instances: dict[str, Any], tmp_path: Path
) -> None:
    from race.engine import Engine
    from race.indexing.catalog import parse_catalog
    from rsc import InputError

    catalog = {
        "schema_version": "race.catalog/1",
        "instances": {
            "docs": {"kind": "tantivy", "location": str(index_dir)},
            "chunks": {
                "kind": "milvus",
                "location": str(milvus_instances["folders"]["FLAT"]),
                "consistency": "Bounded",
            },
        },
    }
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog), encoding="utf-8")
    plan = _incident_plan(required_coverage="exhaustive_for_declared_fragment")
    engine = Engine.from_catalog(path)
    try:
        contract = next(c for c in engine.adapters["chunks"].index_contracts() if c.mode == "milvus_flat")
        assert "Bounded consistency" in contract.snapshot.freshness
        receipt = engine.run_sync(plan)
        (ob,) = receipt.obligations
        assert ob.status.value == "satisfied", receipt.gaps
        caveats = [g for g in receipt.gaps if g.kind is GapKind.WEAK_CONSISTENCY]
        assert len(caveats) == 1 and caveats[0].severity is GapSeverity.CAVEAT and caveats[0].backend == "chunks"
        hits = [h for e in receipt.evidence for h in e.hits]
        direct = _direct(cast(Any, engine.adapters["chunks"]).inner, TEXT, 'doc_type == "incident"', 5, "Bounded")
        assert [h.chunk_id for h in hits] == direct
    finally:
        anyio.run(engine.aclose)
    bad = {**catalog, "instances": {"docs": {"kind": "tantivy", "location": "x", "consistency": "Bounded"}}}
    with pytest.raises(InputError, match="consistency"):
        parse_catalog(json.dumps(bad).encode(), where="c.json", toml=False)
    wrong = {**catalog, "instances": {"m": {"kind": "milvus", "location": "x", "consistency": "strong"}}}
    with pytest.raises(InputError, match="consistency"):
        parse_catalog(json.dumps(wrong).encode(), where="c.json", toml=False)


# -- partition keys ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(milvus_instances: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A FLAT collection of the bundled corpus whose partition key is ``component``, read Bounded."""
    from milvus_lite import server_manager_instance

    from backends.milvus import MilvusAdapter
    from backends.milvus.adapter import LITE_FILE

    folder = tmp_path_factory.mktemp("milvus_keyed")
    MilvusAdapter.build(
        milvus_instances["corpus"],
        folder,
        vectors=milvus_instances["vectors"],
        consistency="Bounded",
        partition_key="component",
    )
    adapter = MilvusAdapter.open(folder)
    try:
        yield adapter
    finally:
        adapter.close()
        server_manager_instance.release_server(str(folder / MilvusAdapter.backend / LITE_FILE))


def test_the_schema_has_the_partition_key(keyed: Any) -> None:
    from pymilvus import MilvusClient

    client = MilvusClient(keyed._uri)
    try:
        described = client.describe_collection(keyed.collection)
    finally:
        client.close()
    keys = [f["name"] for f in described["fields"] if f.get("is_partition_key")]
    assert keys == ["component"]
    manifest = json.loads((keyed.folder / "race.json").read_text(encoding="utf-8"))
    assert manifest["partition_key"] == "component" and manifest["consistency_level"] == "Bounded"
    contract = keyed.index_contracts()[0]
    assert contract.filters["component"].support is FilterSupportClass.NATIVE_PREFILTER_EXACT
    assert "Partition key 'component'" in contract.description
    assert "Read at consistency level Bounded" in contract.description


def test_partition_key_filters_are_exact(keyed: Any, milvus_instances: dict[str, Any]) -> None:
    """Ids and distances of the float64 numpy top-k over the collection's own rows restricted by
    ``Filter.matches``, for eq and in filters on the key, alone and with another filter."""
    from backends.milvus.adapter import exact_top_k
    from backends.milvus.client import VECTOR

    rows = keyed.read_rows(("chunk_id", "metadata_json", VECTOR))
    ids = [str(r["chunk_id"]) for r in rows]
    metas = [json.loads(r["metadata_json"]) for r in rows]
    vectors = np.asarray([r[VECTOR] for r in rows], dtype=np.float32)
    assert len(ids) == len(milvus_instances["corpus"].chunks)
    cases: tuple[tuple[Filter, ...], ...] = (
        (Filter(field="component", value="storage"),),
        (Filter(field="component", value="security"),),
        (Filter(field="component", op=FilterOp.IN, values=("network", "replication")),),
        (Filter(field="component", value="storage"), Filter(field="doc_type", value="incident")),
        (Filter(field="component", value="no-such-component"),),
    )
    for text in (TEXT, "partition stall election raft", "client certificates mitigate the TLS advisory"):
        query, _ = keyed._queries.vector(text)
        for filters in cases:
            keep = [i for i, m in enumerate(metas) if all(f.matches(m) for f in filters)]
            for k in (10, max(len(keep), 1)):
                expected = exact_top_k(vectors[keep], [ids[i] for i in keep], query, k) if keep else []
                result = _scan(keyed, _request(keyed, text, k, filters))
                assert [h.chunk_id for h in result.hits] == [cid for cid, _ in expected], (text, filters, k)
                assert [h.custody.score for h in result.hits] == pytest.approx([d for _, d in expected], abs=2e-6)
                assert result.total_matches == len(keep)
                assert [g.kind for g in result.gaps] == [GapKind.WEAK_CONSISTENCY]


def test_a_partition_key_must_be_held_by_every_chunk(milvus_instances: dict[str, Any], tmp_path: Path) -> None:
    from backends.milvus import MilvusAdapter
    from rsc import InputError

    for key in ("date", "nope"):
        with pytest.raises(InputError, match="partition key"):
            MilvusAdapter.build(
                milvus_instances["corpus"], tmp_path, vectors=milvus_instances["vectors"], partition_key=key
            )
    assert not (tmp_path / "milvus").exists()


def test_the_command_line_declares_level_and_partition_key(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from milvus_lite import server_manager_instance

    from backends.milvus.adapter import LITE_FILE
    from race.cli.main import main
    from race.indexing.bundled import BUNDLED_CORPUS

    out = tmp_path / "mv"
    load = ["milvus", str(BUNDLED_CORPUS), "--out", str(out), "--vectors-from", str(index_dir)]
    assert main([*load, "--partition-key", "date"]) == 2
    assert "partition key 'date'" in capsys.readouterr().err
    try:
        assert main([*load, "--consistency", "Eventually", "--partition-key", "doc_type"]) == 0
        capsys.readouterr()
        manifest = json.loads((out / "milvus" / "race.json").read_text(encoding="utf-8"))
        assert (manifest["consistency_level"], manifest["partition_key"]) == ("Eventually", "doc_type")
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps(_incident_plan(allow_contracts=["milvus.flat_prefilter"])))
        assert main(["run", str(plan), "--index", str(index_dir), "--milvus", str(out), "--json"]) == 0
        receipt = json.loads(capsys.readouterr().out)
        kinds = [(g["kind"], g["severity"]) for g in receipt["gaps"]]
        assert kinds == [("weak_consistency", "caveat")]
        hits = [h for e in receipt["evidence"] for h in e["hits"]]
        assert len(hits) == 5 and all(h["metadata"]["doc_type"] == "incident" for h in hits)
    finally:
        server_manager_instance.release_server(str(out / "milvus" / LITE_FILE))
