"""The catalog guide's worked example (docs/guide/catalog.md), run as written:
fixtures/catalogs/example.toml attaches a LanceDB table RACE did not build and a Milvus
collection (milvus-lite, started by the backend suite's conftest), and
fixtures/catalogs/example_plan.json unions them with a tantivy leg. Explain names each instance
and contract; every hit's custody names its instance; each leg's hits are what a
direct call of that backend (or numpy, for the attached table) answers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from planner import render_text
from race.engine import Engine
from rsc import Query, ScanRequest
from tests.backends.attached import build_lance_table, license_rows
from tests.conftest import FIXTURES, roomy_plan

EXAMPLE = FIXTURES / "catalogs"


@pytest.fixture
def example(index_dir: Path, milvus_instances: dict[str, Any], tmp_path: Path) -> Path:
    """The example's folder: the catalog beside the index, the table and the collection it names."""
    from backends.models.embedding import MiniLMEmbedder

    shutil.copy(EXAMPLE / "example.toml", tmp_path / "example.toml")
    (tmp_path / "index").symlink_to(index_dir)
    (tmp_path / "milvus").symlink_to(milvus_instances["folders"]["FLAT"])
    rows = license_rows()
    build_lance_table(tmp_path / "lake", rows, MiniLMEmbedder().embed([r["body"] for r in rows]))
    return tmp_path / "example.toml"


def _direct(adapter: Any, scan: ScanRequest, rsc_id: str, backend: str) -> list[tuple[str, float]]:
    request = scan.model_copy(update={"rsc_id": rsc_id, "backend": backend})
    return [(h.chunk_id, h.custody.score) for h in anyio.run(adapter.scan, request).hits]


def test_union_of_tantivy_an_attached_lancedb_table_and_milvus(
    example: Path, index_dir: Path, milvus_flat: Any
) -> None:
    engine = Engine.from_catalog(example)
    try:
        plan = EXAMPLE / "example_plan.json"
        explain = engine.plan_sync(plan)
        text = render_text(explain)
        for line in (
            "scan incident-words [G2] docs.tantivy.bm25@1.0.0 mode=bm25 k=3",
            "scan licence-terms [G3] tickets.lancedb.flat_prefilter@1.0.0 mode=vector_flat k=3 pushed=[-] "
            "residual=[team in ['legal', 'ops']]",
            "scan similar-incidents [G4] chunks.milvus.flat_prefilter@",
        ):
            assert line in text
        for instance in ("chunks", "docs", "tickets"):
            assert f"generation  {instance}: " in text
        # As written but for its deadlines, far above need: what is checked is what each leg finds.
        receipt = engine.run_sync(roomy_plan(plan))
        # A chunk found by tantivy and by Milvus is one evidence item (both use RACE's chunk keys)
        # holding both hits; each hit names the instance and contract that found it.
        contracts = {
            "incident-words": "docs.tantivy.bm25",
            "licence-terms": "tickets.lancedb.flat_prefilter",
            "similar-incidents": "chunks.milvus.flat_prefilter",
        }
        everything = [h for item in receipt.evidence for h in item.hits]
        hits = {o: [h for h in everything if h.custody.rsc.startswith(f"{c}@")] for o, c in contracts.items()}
        assert sum(len(found) for found in hits.values()) == len(everything)
        assert {o: {h.custody.backend for h in found} for o, found in hits.items()} == {
            "incident-words": {"docs"},
            "licence-terms": {"tickets"},
            "similar-incidents": {"chunks"},
        }
        # Each leg answers what its backend answers when called directly.
        from backends.tantivy import TantivyAdapter

        by_ob = {o.id: o for o in engine.parse(plan).obligations}
        tantivy = TantivyAdapter.open(index_dir)
        lexical = sorted(hits["incident-words"], key=lambda h: h.custody.rank)
        request = ScanRequest(
            obligation="incident-words",
            rsc_id="tantivy.bm25",
            rsc_version="1.0.0",
            backend="tantivy",
            mode="bm25",
            query=by_ob["incident-words"].query,
            k=3,
        )
        assert [(h.chunk_id, h.custody.score) for h in lexical] == _direct(tantivy, request, "tantivy.bm25", "tantivy")
        assert all(h.custody.source_hash and h.custody.source_hash.startswith("sha256:") for h in lexical)
        flat = next(c for c in milvus_flat.index_contracts() if c.rsc_id == "milvus.flat_prefilter")
        milvus_request = request.model_copy(
            update={"rsc_version": flat.version, "mode": flat.mode, "query": by_ob["similar-incidents"].query}
        )
        vector = sorted(hits["similar-incidents"], key=lambda h: h.custody.rank)
        assert [(h.chunk_id, h.custody.score) for h in vector] == _direct(
            milvus_flat, milvus_request, "milvus.flat_prefilter", "milvus"
        )
        # The attached table: the exact cosine top-3 of the rows whose team is legal or ops (numpy).
        from backends.models.embedding import MiniLMEmbedder

        rows = license_rows()
        embedder = MiniLMEmbedder()
        vectors = embedder.embed([r["body"] for r in rows]).astype(np.float64)
        query = embedder.embed([by_ob["licence-terms"].query.text or ""])[0].astype(np.float64)
        distance = 1.0 - vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
        # The catalog weakened `team` to postfilter_only: the filter is checked on the 2k+8 nearest
        # rows of the whole table, and the first k that pass are the answer.
        nearest = sorted((d, r["doc_key"], r["team"]) for d, r in zip(distance, rows, strict=True))[: 2 * 3 + 8]
        expected = [(key, d) for d, key, team in nearest if team in ("legal", "ops")][:3]
        table = sorted(hits["licence-terms"], key=lambda h: h.custody.rank)
        assert [h.chunk_id for h in table] == [key for key, _ in expected]
        assert [h.custody.score for h in table] == pytest.approx([d for _, d in expected], abs=1e-5)
        for hit in table:
            row = next(r for r in rows if r["doc_key"] == hit.chunk_id)
            c = hit.custody
            assert (c.source_path, c.line_start, c.line_end, c.source_hash) == (
                row["src"],
                row["first_line"],
                row["last_line"],
                row["digest"],
            )
            assert c.rsc == "tickets.lancedb.flat_prefilter@1.0.0" and not c.absent
    finally:
        anyio.run(engine.aclose)


def test_two_milvus_instances_with_their_own_index_types_and_contracts(
    milvus_instances: dict[str, Any], milvus_flat: Any, milvus_ann: Any, tmp_path: Path
) -> None:
    folders = milvus_instances["folders"]
    catalog = tmp_path / "two.toml"
    catalog.write_text(
        'schema_version = "race.catalog/1"\n'
        f'[instances.exact]\nkind = "milvus"\nlocation = "{folders["FLAT"]}"\n'
        f'[instances.graph_ann]\nkind = "milvus"\nlocation = "{folders["HNSW"]}"\n'
    )
    engine = Engine.from_catalog(catalog)
    try:
        by_id = {c.rsc_id: c for c in engine.contracts()}
        assert sorted(by_id) == ["exact.milvus.flat_prefilter", "graph_ann.milvus.ann_filtered"]
        assert by_id["exact.milvus.flat_prefilter"].coverage.claim.value == "exhaustive_topk"
        assert by_id["graph_ann.milvus.ann_filtered"].coverage.claim.value == "approximate"
        text = "the broker ran out of memory and was killed"
        for name, direct, own in (
            ("exact", milvus_flat, "milvus.flat_prefilter"),
            ("graph_ann", milvus_ann, "milvus.ann_filtered"),
        ):
            contract = by_id[f"{name}.{own}"]
            request = ScanRequest(
                obligation="t",
                rsc_id=contract.rsc_id,
                rsc_version=contract.version,
                backend=name,
                mode=contract.mode,
                query=Query(text=text),
                k=5,
            )
            answer = anyio.run(engine.adapters[name].scan, request)
            assert {h.custody.backend for h in answer.hits} == {name}
            assert [(h.chunk_id, h.custody.score) for h in answer.hits] == _direct(direct, request, own, "milvus")
    finally:
        anyio.run(engine.aclose)
