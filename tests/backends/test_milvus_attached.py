"""A Milvus collection RACE did not load, attached through a catalog: created here with pymilvus
directly in milvus-lite (field names RACE never heard of, paragraphs of the system's licence
files, a partition key), its contract generated from the real collection, a plan run over it
answering what a direct pymilvus search and a float64 numpy reference answer, custody fields
it lacks reported absent with a reason, and an HNSW-indexed collection stating the recall
measured on it when attached."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import numpy as np
import pytest

from rsc import FilterSupportClass, GapKind, IndexMissingError
from tests.backends.attached import license_rows
from tests.backends.conftest import create_milvus_collection, milvus_available
from tests.conftest import FIXTURES

pytestmark = pytest.mark.skipif(not milvus_available(), reason="the race[milvus] extra is not installed")

TEXT = "you may redistribute copies of the software provided the notice is kept"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from milvus_lite import server_manager_instance

    from backends.models.embedding import MiniLMEmbedder

    folder = tmp_path_factory.mktemp("milvus_lake")
    uri = str(folder / "lake.db")
    rows = license_rows()
    vectors = MiniLMEmbedder().embed([r["body"] for r in rows]).astype(np.float32)
    create_milvus_collection(uri, "tickets", rows, vectors, "FLAT")
    create_milvus_collection(uri, "tickets_hnsw", rows, vectors, "HNSW")
    try:
        yield {"folder": folder, "uri": uri, "rows": rows, "vectors": vectors}
    finally:
        server_manager_instance.release_server(uri)


def _catalog(lake: dict[str, Any], index_dir: Path, collection: str = "tickets", **extra: Any) -> Path:
    """fixtures/catalogs/attached_milvus.toml beside the collection and the index it names, with
    ``collection`` and ``extra`` set on its Milvus instance."""
    folder = Path(lake["folder"])
    if not (folder / "index").exists():
        (folder / "index").symlink_to(index_dir)
    catalog = tomllib.loads((FIXTURES / "catalogs" / "attached_milvus.toml").read_text(encoding="utf-8"))
    catalog["instances"]["tickets"].update(collection=collection, **extra)
    path = folder / f"{collection}.json"
    path.write_text(json.dumps(catalog), encoding="utf-8")
    return path


def _plan(k: int) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "both",
        "obligations": [
            {
                "id": "lexical",
                "kind": "seek_support",
                "query": {"text": "broker memory killed"},
                "query_class": "lexical",
                "k": 3,
                "allow_contracts": ["docs.tantivy.bm25"],
            },
            {
                "id": "licences",
                "kind": "seek_support",
                "query": {"text": TEXT},
                "query_class": "conceptual",
                "k": k,
                "hard_filters": [{"field": "team", "op": "in", "values": ["legal", "web"]}],
                "required_coverage": "exhaustive_for_declared_fragment",
                "allow_contracts": ["tickets.milvus.flat_prefilter"],
            },
        ],
        "operators": [{"id": "both", "op": "union", "inputs": ["lexical", "licences"]}],
    }


def _direct(uri: str, vector: Any, k: int) -> list[str]:
    from pymilvus import MilvusClient

    client = MilvusClient(uri)
    try:
        answer = client.search(
            "tickets",
            data=[np.asarray(vector, dtype=np.float32).tolist()],
            limit=1000,
            filter='team in ["legal", "web"]',
            output_fields=["doc_key"],
            search_params={"metric_type": "COSINE"},
        )
    finally:
        client.close()
    return [cid for _, cid in sorted((1.0 - float(h["distance"]), str(h["doc_key"])) for h in answer[0])[:k]]


def test_an_attached_collection_answers_as_pymilvus_and_numpy(lake: dict[str, Any], index_dir: Path) -> None:
    from backends.milvus.search import exact_top_k
    from race.engine import Engine

    engine = Engine.from_catalog(_catalog(lake, index_dir))
    try:
        adapter = cast(Any, engine.adapters["tickets"])
        (contract,) = adapter.index_contracts()
        assert contract.rsc_id == "tickets.milvus.flat_prefilter" and contract.coverage.claim.value == "exhaustive_topk"
        assert sorted(contract.filters) == ["chunk_id", "doc_id", "prio", "team"]
        assert all(f.support is FilterSupportClass.NATIVE_PREFILTER_EXACT for f in contract.filters.values())
        assert "Partition key ['team']" in contract.description and "'tickets'" in contract.description
        explain = engine.plan_sync(_plan(6)).model_dump_json()
        assert "tickets.milvus.flat_prefilter@1.0.0" in explain and "docs.tantivy.bm25@" in explain
        receipt = engine.run_sync(_plan(6))
        statuses = {o.id: o.status.value for o in receipt.obligations}
        assert statuses["licences"] == "satisfied", receipt.gaps
        hits = [h for e in receipt.evidence for h in e.hits if h.custody.backend == "tickets"]
        assert {h.custody.backend for e in receipt.evidence for h in e.hits} == {"docs", "tickets"}
        vector, _ = adapter._queries.vector(TEXT)
        rows, vectors = lake["rows"], lake["vectors"]
        keep = [i for i, r in enumerate(rows) if r["team"] in ("legal", "web")]
        expected = exact_top_k(vectors[keep], [rows[i]["doc_key"] for i in keep], vector, 6)
        ranked = sorted(hits, key=lambda h: h.custody.rank)
        assert [h.chunk_id for h in ranked] == [cid for cid, _ in expected] == _direct(lake["uri"], vector, 6)
        assert [h.custody.score for h in ranked] == pytest.approx([d for _, d in expected], abs=2e-6)
        by_key = {r["doc_key"]: r for r in rows}
        for hit in ranked:
            row = by_key[hit.chunk_id]
            assert hit.key == f"tickets:{hit.chunk_id}" and hit.text == row["body"]
            assert hit.metadata == {"prio": row["prio"], "team": row["team"]}
            assert hit.custody.source_path == row["src"]
            assert hit.custody.line_start is None and hit.custody.source_hash is None
            assert set(hit.custody.absent) == {"line_start", "line_end", "source_hash"}
            assert "maps no column" in hit.custody.absent["source_hash"]
            assert hit.custody.index_identity.endswith("/tickets")
        assert not [g for g in receipt.gaps if g.kind is GapKind.WEAK_CONSISTENCY]
    finally:
        anyio.run(engine.aclose)


def test_an_attached_collection_read_bounded_says_so(lake: dict[str, Any], index_dir: Path) -> None:
    from race.engine import Engine

    engine = Engine.from_catalog(_catalog(lake, index_dir, consistency="Bounded"))
    try:
        (contract,) = engine.adapters["tickets"].index_contracts()
        assert "Bounded consistency" in contract.snapshot.freshness
        receipt = engine.run_sync(_plan(4))
        caveats = [g for g in receipt.gaps if g.kind is GapKind.WEAK_CONSISTENCY]
        assert [g.backend for g in caveats] == ["tickets"]
        assert {o.id: o.status.value for o in receipt.obligations}["licences"] == "satisfied"
    finally:
        anyio.run(engine.aclose)


def test_an_hnsw_collection_states_the_recall_measured_on_it(lake: dict[str, Any], index_dir: Path) -> None:
    """The approximate contract's recall is measured at attach: its description's unfiltered
    mean recall@10 is what a direct pymilvus HNSW search gives against a float64 numpy top-10
    over the same queries (normalized sums of two stored vectors), and the stated recall is no
    higher than any bucket's mean."""
    import re

    from pymilvus import MilvusClient

    from backends.milvus.client import RECALL_K, RECALL_QUERIES
    from backends.milvus.search import exact_top_k
    from race.engine import Engine

    engine = Engine.from_catalog(_catalog(lake, index_dir, collection="tickets_hnsw"))
    try:
        (contract,) = engine.adapters["tickets"].index_contracts()
    finally:
        anyio.run(engine.aclose)
    assert contract.rsc_id == "tickets.milvus.ann_filtered" and contract.mode == "milvus_ann"
    assert contract.coverage.claim.value == "approximate" and contract.coverage.recall is not None
    assert {f.support for f in contract.filters.values()} == {FilterSupportClass.NATIVE_FILTERED_ANN}
    assert all(f.recall == contract.coverage.recall for f in contract.filters.values())
    means = {m[0]: float(m[1]) for m in re.findall(r"(\S+) mean ([0-9.]+), bound", contract.description)}
    assert set(means) >= {"unfiltered", "team=legal"} and contract.coverage.recall <= min(means.values())
    rows = sorted(lake["rows"], key=lambda r: str(r["doc_key"]))
    by_key = {r["doc_key"]: v for r, v in zip(lake["rows"], lake["vectors"], strict=True)}
    ids = [r["doc_key"] for r in rows]
    vectors = np.asarray([by_key[i] for i in ids], dtype=np.float32)
    client = MilvusClient(lake["uri"])
    recalls = []
    try:
        for q in range(min(RECALL_QUERIES, len(ids))):
            a, b = (q * 7919) % len(ids), (q * 104_729 + 1) % len(ids)
            query = vectors[a] + vectors[b]
            query = (query / max(float(np.linalg.norm(query)), 1e-12)).astype(np.float32)
            exact = {cid for cid, _ in exact_top_k(vectors, ids, query, RECALL_K)}
            answer = client.search(
                "tickets_hnsw", data=[query.tolist()], limit=RECALL_K, output_fields=["doc_key"],
                search_params={"metric_type": "COSINE", "params": {"ef": 64}},
            )  # fmt: skip
            recalls.append(len(exact & {str(h["doc_key"]) for h in answer[0]}) / len(exact))
    finally:
        client.close()
    assert means["unfiltered"] == pytest.approx(float(np.mean(recalls)), abs=5e-4)


def test_a_mapping_names_real_fields(lake: dict[str, Any], index_dir: Path) -> None:
    from race.engine import Engine
    from race.indexing.catalog import parse_catalog
    from rsc import InputError

    path = _catalog(lake, index_dir)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["instances"]["tickets"]["fields"]["hash"] = "sha256_of_file"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(IndexMissingError, match="no field 'sha256_of_file'"):
        Engine.from_catalog(path)
    del data["instances"]["tickets"]["collection"]
    with pytest.raises(InputError, match="collection"):
        parse_catalog(json.dumps(data).encode(), where="c.json", toml=False)


def test_a_collection_dropped_after_attach_is_a_gap(lake: dict[str, Any], index_dir: Path) -> None:
    """Injected fault: another job drops the collection after the engine attached it; the leg
    becomes a gap of the obligation, and the other leg still answers."""
    from pymilvus import MilvusClient

    from race.engine import Engine
    from rsc import BackendUnavailable

    create_milvus_collection(lake["uri"], "tickets_gone", lake["rows"], lake["vectors"], "FLAT")
    engine = Engine.from_catalog(_catalog(lake, index_dir, collection="tickets_gone"))
    try:
        client = MilvusClient(lake["uri"])
        try:
            client.drop_collection("tickets_gone")
        finally:
            client.close()
        with pytest.raises(BackendUnavailable):
            engine.adapters["tickets"].generation()
        receipt = engine.run_sync(_plan(4))
        statuses = {o.id: o.status.value for o in receipt.obligations}
        assert statuses["licences"] != "satisfied" and statuses["lexical"] == "satisfied"
        assert any(g.obligation == "licences" and g.backend == "tickets" for g in receipt.gaps), receipt.gaps
        assert not [h for e in receipt.evidence for h in e.hits if h.custody.backend == "tickets"]
    finally:
        anyio.run(engine.aclose)


def test_a_collection_of_a_model_race_cannot_run_takes_caller_vectors(lake: dict[str, Any], index_dir: Path) -> None:
    from backends.milvus.search import exact_top_k
    from backends.models.embedding import MiniLMEmbedder
    from race.engine import Engine

    model = MiniLMEmbedder()
    stranger = model.identity.model_copy(update={"name": "intfloat/e5-small-v2"})
    engine = Engine.from_catalog(_catalog(lake, index_dir, embedder=stranger.model_dump(mode="json")))
    try:
        (contract,) = engine.adapters["tickets"].index_contracts()
        assert contract.model_calls == 0 and "from the caller alone" in contract.description
        plan = _plan(6)
        vector = model.embed([TEXT])[0]
        plan["obligations"][1]["query"] = {"vector": [float(v) for v in vector], "embedder": stranger.model_dump()}
        receipt = engine.run_sync(plan)
        licences = next(o for o in receipt.obligations if o.id == "licences")
        assert licences.status.value == "satisfied" and licences.model_calls == 0
        hits = sorted(
            (h for e in receipt.evidence for h in e.hits if h.custody.backend == "tickets"),
            key=lambda h: h.custody.rank,
        )
        rows, vectors = lake["rows"], lake["vectors"]
        keep = [i for i, r in enumerate(rows) if r["team"] in ("legal", "web")]
        expected = exact_top_k(vectors[keep], [rows[i]["doc_key"] for i in keep], vector, 6)
        assert [h.chunk_id for h in hits] == [cid for cid, _ in expected]
    finally:
        anyio.run(engine.aclose)
