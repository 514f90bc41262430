"""Milvus beyond the shared suite: the FLAT contract against a float64 reference, filter
expressions that no value can subvert, generations that name content, the client's failures
as RACE errors, the measured ANN recall, and a plan that unions tantivy with a collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import grpc
import numpy as np
import pytest

from backends.ingest.schema import FieldSpec, FieldType
from race.engine import Engine
from rsc import (
    BackendTimeout,
    BackendUnavailable,
    Filter,
    FilterOp,
    SnapshotMoved,
)
from tests.backends.conftest import milvus_available
from tests.conftest import ROOMY_BUDGET
from tests.scan_requests import milvus_request as _request
from tests.scan_requests import scan_now as _scan

pytestmark = pytest.mark.skipif(not milvus_available(), reason="the race[milvus] extra is not installed")

QUERIES = (
    "the broker ran out of memory and was killed",
    "partition stall election raft",
    "compaction lost acknowledged messages fsync",
)
FILTERS: tuple[tuple[Filter, ...], ...] = (
    (),
    (Filter(field="doc_type", value="incident"),),
    (Filter(field="component", op=FilterOp.IN, values=("network", "storage")),),
    (Filter(field="date", op=FilterOp.RANGE, gte="2024-01-01", lte="2024-12-31"),),
    (Filter(field="authority", value="official"), Filter(field="date", op=FilterOp.RANGE, gte="2024-06-01")),
    (Filter(field="doc_id", op=FilterOp.IN, values=("adr-0012", "ksa-2024-003")),),
)


def test_flat_contract_is_the_float64_reference(milvus_flat: Any, milvus_instances: dict[str, Any]) -> None:
    """Ids in order, and distances to float32 rounding, of an exact numpy top-k over the same
    vectors restricted by ``Filter.matches``: filters included, and deep enough to pass the
    rows a filter keeps."""
    from backends.milvus.adapter import exact_top_k

    corpus, vectors = milvus_instances["corpus"], milvus_instances["vectors"]
    chunks = corpus.chunks
    for text in QUERIES:
        query, _ = milvus_flat._queries.vector(text)
        for filters in FILTERS:
            keep = [i for i, c in enumerate(chunks) if all(f.matches(c.metadata) for f in filters)]
            assert keep, filters
            for k in (10, len(chunks)):
                expected = exact_top_k(vectors[keep], [chunks[i].chunk_id for i in keep], query, k)
                result = _scan(milvus_flat, _request(milvus_flat, text, k, filters))
                assert [h.chunk_id for h in result.hits] == [cid for cid, _ in expected], (text, filters, k)
                scores = [h.custody.score for h in result.hits]
                assert scores == pytest.approx([d for _, d in expected], abs=2e-6)
                assert result.total_matches == len(keep)
                assert result.exhausted is (k >= len(keep))


def test_filter_values_cannot_change_the_expression(milvus_flat: Any) -> None:
    from backends.milvus.expr import NOTHING, filter_expr, string_literal

    fields = {"status": FieldSpec(type=FieldType.KEYWORD), "n": FieldSpec(type=FieldType.INTEGER)}
    hostile = 'x" or chunk_id != "'
    expr = filter_expr((Filter(field="status", value=hostile),), fields)
    assert expr == '(status == "x\\" or chunk_id != \\"")'
    assert string_literal('a\\"b\nc') == '"a\\\\\\"b\\nc"'
    # Operands no stored value can equal match nothing, as in Filter.matches.
    assert filter_expr((Filter(field="status", value=3),), fields) == NOTHING
    assert filter_expr((Filter(field="n", value=2.5),), fields) == NOTHING
    assert filter_expr((Filter(field="n", op=FilterOp.RANGE, gte=1.5, lte=3.5),), fields) == "(n >= 2) and (n <= 3)"
    with pytest.raises(BackendUnavailable):
        filter_expr((Filter(field="nope", value="x"),), fields)
    # Against the real engine: the hostile value is one literal, which no row holds.
    for field in ("doc_type", "chunk_id"):
        for value in (hostile, "incident\\", "' or 1 == 1 or '", "incident\n"):
            result = _scan(milvus_flat, _request(milvus_flat, QUERIES[0], 5, (Filter(field=field, value=value),)))
            assert result.hits == () and result.total_matches == 0 and result.exhausted
    typed = _scan(milvus_flat, _request(milvus_flat, QUERIES[0], 5, (Filter(field="doc_type", value=7),)))
    assert typed.hits == () and typed.total_matches == 0


def test_hnsw_contract_states_the_recall_measured_on_its_index(milvus_ann: Any) -> None:
    (contract,) = milvus_ann.index_contracts()
    assert contract.rsc_id == "milvus.ann_filtered" and contract.coverage.claim.value == "approximate"
    recall = contract.coverage.recall
    assert recall is not None and 0.0 < recall <= 1.0
    assert "measured on this collection at build" in contract.description
    for name, support in contract.filters.items():
        assert support.support.value == "native_filtered_ann", name
        assert support.recall == recall and support.profile is not None and "HNSW" in support.profile
    assert not contract.early_stop.sorted_access
    # The FLAT collection cannot serve the ANN mode, nor the HNSW one the exact mode.
    with pytest.raises(BackendUnavailable):
        _scan(milvus_ann, _request(milvus_ann, QUERIES[0], 5).model_copy(update={"mode": "milvus_flat"}))


@pytest.fixture
def small_instance(milvus_instances: dict[str, Any], tmp_path: Path) -> Any:
    """A FLAT collection of 20 chunks of its own, which a test may change."""
    from milvus_lite import server_manager_instance

    from backends.milvus.adapter import LITE_FILE, MilvusAdapter

    corpus = milvus_instances["corpus"]
    small = corpus.model_copy(update={"chunks": corpus.chunks[:20]})
    MilvusAdapter.build(small, tmp_path, vectors=milvus_instances["vectors"][:20])
    adapter = MilvusAdapter.open(tmp_path)
    yield adapter
    adapter.close()
    server_manager_instance.release_server(str(tmp_path / MilvusAdapter.backend / LITE_FILE))


def test_generation_names_content_and_a_moved_collection_is_refused(small_instance: Any) -> None:
    from pymilvus import MilvusClient

    from backends.base import UNKNOWN_GENERATION, RefusedSnapshot

    adapter = small_instance
    planned = adapter.generation()
    assert adapter.generation() == planned
    held = adapter.pinned(planned)
    assert held.generation() == planned
    request = _request(adapter, QUERIES[0], 3)
    assert _scan(held, request).generation == planned

    client = MilvusClient(adapter._uri)
    try:
        row = client.query(adapter.collection, filter="", limit=1, output_fields=["*"])[0]
        client.upsert(adapter.collection, [{**row, "text": row["text"] + " (edited)"}])
    finally:
        client.close()
    moved = adapter.generation()
    assert moved != planned
    with pytest.raises(SnapshotMoved) as refused:
        _scan(held, request)
    assert refused.value.planned == planned and refused.value.current == moved
    assert isinstance(adapter.pinned(planned), RefusedSnapshot)
    assert _scan(adapter, request).generation == moved

    # A released collection (as a restarted server holds it) is loaded again when opened.
    client = MilvusClient(adapter._uri)
    try:
        client.release_collection(adapter.collection)
    finally:
        client.close()
    with pytest.raises(BackendUnavailable):
        adapter.generation()
    reopened = type(adapter).open(adapter._folder.parent)
    try:
        assert reopened.generation() == moved
    finally:
        reopened.close()

    client = MilvusClient(adapter._uri)
    try:
        client.drop_collection(adapter.collection)
    finally:
        client.close()
    with pytest.raises(BackendUnavailable):
        adapter.generation()
    assert anyio.run(Engine({"milvus": adapter}).current_generations) == {"milvus": UNKNOWN_GENERATION}
    assert adapter.statistics().rows == 0
    gone = adapter.pinned(moved)
    assert isinstance(gone, RefusedSnapshot) and gone.current == UNKNOWN_GENERATION
    with pytest.raises(BackendUnavailable):
        _scan(adapter, request)


class _DeadlineError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return "deadline exceeded"


def test_client_failures_are_backend_errors(milvus_flat: Any) -> None:
    from pymilvus import MilvusException

    from backends.milvus.adapter import milvus_errors

    with pytest.raises(BackendTimeout), milvus_errors("milvus"):
        raise _DeadlineError()
    with pytest.raises(BackendTimeout), milvus_errors("milvus"):
        raise grpc.FutureTimeoutError()
    with pytest.raises(BackendTimeout), milvus_errors("milvus"):
        raise MilvusException(code=1, message="Retry timeout: 0.001s")
    with pytest.raises(BackendUnavailable), milvus_errors("milvus"):
        raise MilvusException(code=100, message="collection not found")
    # A real call past its deadline: opening checks the collection is loaded, which may be the
    # call that runs out of time; otherwise the first read is.
    with pytest.raises((BackendTimeout, BackendUnavailable)):
        impatient = type(milvus_flat).open(milvus_flat._folder.parent, timeout=1e-9)
        try:
            impatient.generation()
        finally:
            impatient.close()


def test_cli_and_engine_do_not_import_pymilvus() -> None:
    code = (
        "import sys, contextlib, io\n"
        "import race.cli.main\n"
        "from race.engine import Engine\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    race.cli.main.main(['--help'])\n"
        "assert 'pymilvus' not in sys.modules and 'milvus_lite' not in sys.modules, 'pymilvus imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def union_plan() -> dict[str, Any]:
    """A lexical tantivy leg and a conceptual Milvus leg of one question, unioned."""
    text = "the broker ran out of memory and was killed"
    return {
        "schema_version": "race.plan/1",
        "root": "both",
        "obligations": [
            {
                "id": "lexical",
                "kind": "seek_support",
                "query": {"text": "broker memory killed"},
                "query_class": "lexical",
                "k": 5,
                "allow_contracts": ["tantivy.bm25"],
            },
            {
                "id": "collection",
                "kind": "seek_support",
                "query": {"text": text},
                "query_class": "conceptual",
                "k": 5,
                "hard_filters": [{"field": "doc_type", "value": "incident"}],
                "required_coverage": "exhaustive_for_declared_fragment",
                "allow_contracts": ["milvus.flat_prefilter"],
            },
        ],
        "operators": [{"id": "both", "op": "union", "inputs": ["lexical", "collection"]}],
        "budget": ROOMY_BUDGET,  # what the legs find is checked, not how fast: none may time out
    }


def test_a_plan_unions_tantivy_with_a_milvus_collection(index_dir: Path, milvus_instances: dict[str, Any]) -> None:
    engine = Engine.open(index_dir, milvus=[milvus_instances["folders"]["FLAT"]])
    milvus = engine.adapters["milvus"]
    try:
        assert {"tantivy", "lancedb", "graph", "milvus"} <= set(engine.adapters)
        explain = engine.plan_sync(union_plan())
        text = explain.model_dump_json()
        assert "milvus.flat_prefilter@1.0.0" in text and "tantivy.bm25@" in text
        receipt = engine.run_sync(union_plan())
        statuses = {o.id: o.status.value for o in receipt.obligations}
        assert statuses["collection"] == "satisfied", receipt.gaps
        identities = {h.custody.index_identity for e in receipt.evidence for h in e.hits}
        backends = {h.custody.backend for e in receipt.evidence for h in e.hits}
        assert backends == {"tantivy", "milvus"}
        assert any(i.startswith("milvus:") and i.endswith("/race_chunks") for i in identities), identities
        assert any(i.startswith("tantivy:") for i in identities), identities
        milvus_hits = [h for e in receipt.evidence for h in e.hits if h.custody.backend == "milvus"]
        assert {h.custody.rsc for h in milvus_hits} == {"milvus.flat_prefilter@1.0.0"}
        assert all(h.metadata["doc_type"] == "incident" for h in milvus_hits)
    finally:
        milvus.close()


def test_engine_serves_one_collection() -> None:
    from race.indexing.attach import open_milvus
    from rsc import InputError

    assert open_milvus(()) == {}
    with pytest.raises(InputError):
        open_milvus((Path("a"), Path("b")))


def test_only_measured_index_types_are_built(milvus_instances: dict[str, Any], tmp_path: Path) -> None:
    from backends.milvus.adapter import MilvusAdapter

    # IVF_FLAT's filtered search measured a mean recall of 0.0 for some filters under milvus-lite.
    with pytest.raises(BackendUnavailable):
        MilvusAdapter.build(milvus_instances["corpus"], tmp_path, index_type="IVF_FLAT")
    assert not (tmp_path / "milvus").exists()


def test_the_reference_is_float64() -> None:
    from backends.milvus.adapter import exact_top_k

    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    found = exact_top_k(vectors, ["a", "b", "c"], np.array([1.0, 0.0], dtype=np.float32), 3)
    assert [cid for cid, _ in found] == ["a", "c", "b"]
    assert found[1][1] == pytest.approx(1.0 - 1.0 / np.sqrt(2.0), abs=1e-12)


def test_the_command_line_loads_a_collection_and_runs_a_plan_over_it(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from milvus_lite import server_manager_instance

    from race.cli.main import main
    from race.indexing.bundled import BUNDLED_CORPUS

    out = tmp_path / "mv"
    try:
        assert main(["milvus", str(BUNDLED_CORPUS), "--out", str(out), "--vectors-from", str(index_dir)]) == 0
        assert capsys.readouterr().out.startswith("milvus\tmilvus:race_chunks:index=FLAT/COSINE:rows=213:")
        plan = tmp_path / "union.json"
        plan.write_text(json.dumps(union_plan()))
        assert main(["plan", str(plan), "--index", str(index_dir), "--milvus", str(out)]) == 0
        explain = capsys.readouterr().out
        assert "milvus.flat_prefilter@1.0.0" in explain and "tantivy.bm25@" in explain
        assert "generation  milvus: milvus:race_chunks:index=FLAT/COSINE:rows=213:" in explain
        assert main(["run", str(plan), "--index", str(index_dir), "--milvus", str(out), "--json"]) == 0
        receipt = json.loads(capsys.readouterr().out)
        identities = {h["custody"]["index_identity"] for e in receipt["evidence"] for h in e["hits"]}
        assert "milvus:milvus.db/race_chunks" in identities
        assert any(i.startswith("tantivy:") for i in identities)
        # Two instances for the one backend name, or a missing folder, are bad input.
        assert main(["plan", str(plan), "--index", str(index_dir), "--milvus", str(out), "--milvus", str(out)]) == 2
        assert main(["plan", str(plan), "--index", str(index_dir), "--milvus", str(tmp_path / "nowhere")]) == 2
    finally:
        from backends.milvus.adapter import LITE_FILE

        server_manager_instance.release_server(str(out / "milvus" / LITE_FILE))


def test_an_hnsw_leg_promises_the_calibrated_recall_of_its_collection(
    index_dir: Path, milvus_instances: dict[str, Any]
) -> None:
    """The collection is calibrated at build as LanceDB's tables are; at that generation the
    explain and every hit's custody carry the measured lower bound."""
    plan = union_plan()
    plan["obligations"][1]["allow_contracts"] = ["milvus.ann_filtered"]
    plan["obligations"][1]["required_coverage"] = "heuristic"
    engine = Engine.open(index_dir, milvus=[milvus_instances["folders"]["HNSW"]])
    milvus = engine.adapters["milvus"]
    try:
        found = milvus.calibrations()
        assert found is not None and found[0] == milvus.generation()
        (calibration,) = found[1]
        assert calibration.rsc_id == "milvus.ann_filtered" and calibration.unfiltered is not None
        assert calibration.buckets and all(0.0 <= b.lower_bound <= b.mean_recall <= 1.0 for b in calibration.buckets)
        explain = engine.plan_sync(plan)
        assert "expected recall" in str(explain.model_dump_json()) or "expected_recall" in explain.model_dump_json()
        receipt = engine.run_sync(plan)
        hits = [h for e in receipt.evidence for h in e.hits if h.custody.backend == "milvus"]
        assert hits
        for hit in hits:
            expected = hit.custody.expected_recall
            assert expected is not None and expected.calibration == calibration.fingerprint
    finally:
        milvus.close()


def test_a_closed_adapter_reads_again_on_a_new_connection(small_instance: Any) -> None:
    """An engine closed and then used again (the portal starts its loop again) reads its Milvus
    collection on a new connection: the same generation and the same answer, not a gap."""
    adapter = small_instance
    planned = adapter.generation()
    before = _scan(adapter.pinned(planned), _request(adapter, QUERIES[0], 3))
    adapter.close()
    adapter.close()  # twice: nothing to close
    assert adapter.generation() == planned
    after = _scan(adapter.pinned(planned), _request(adapter, QUERIES[0], 3))
    assert [h.chunk_id for h in after.hits] == [h.chunk_id for h in before.hits] and after.hits
