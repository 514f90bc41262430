"""The exact vector path (``backends/lancedb/exact.py``): the matrix's top-k is the float64
reference top-k, its filter masks are ``Filter.matches``, its distances are LanceDB's flat
ones, no non-finite distance ever reaches a hit, and a matrix is never served for a table
version it was not built from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest

from backends.ingest.corpus import Chunk, load_corpus
from backends.lancedb import LanceAdapter
from backends.lancedb import exact as exact_module
from backends.lancedb.build import chunk_rows, chunk_text
from backends.lancedb.exact import EXACT_DIR, MODE_EXACT, ExactMatrix, cluster_field, margin
from backends.lancedb.matrix_store import MatrixStore
from backends.lancedb.query import TABLE
from backends.models.embedding import MiniLMEmbedder
from race.engine import Engine
from race.indexing.bundled import BUNDLED_CORPUS
from rsc import BackendUnavailable, Filter, FilterOp, Query, ScanRequest, ScanResult
from tests.conftest import FIXTURES

DIMS = 24
ROWS = 3000
K = 10


def _rows(rng: np.random.Generator) -> tuple[list[dict[str, Any]], npt.NDArray[np.float32]]:
    """Rows whose metadata mixes types and sizes of filter: ``tiny`` has values held by 1 to 12
    rows, ``share`` by 1 %, 10 % and 50 % of them, plus typed, multi-valued and missing values."""
    vectors = rng.standard_normal((ROWS, DIMS)).astype(np.float32)
    vectors[7] = 0.0  # no direction
    vectors[11] = vectors[5]  # exact ties with row 5
    vectors[13] = vectors[5]
    vectors[17] = 4.0 * vectors[5]  # the same direction, another norm (exactly: a power of two)
    shares = rng.permutation(np.repeat(["p01", "p10", "p50", "rest"], [30, 300, 1500, ROWS - 1830]))
    tiny = np.full(ROWS, "", dtype=object)
    start = 0
    for size in range(1, 13):
        tiny[start : start + size] = f"t{size:02d}"
        start += size
    tiny = rng.permutation(tiny)
    tiny[7] = "t01z"  # the row without a direction is the only one with this value
    rows = []
    for i in range(ROWS):
        meta: dict[str, Any] = {"share": str(shares[i]), "day": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}"}
        if tiny[i]:
            meta["tiny"] = tiny[i]
        if i % 3:
            # Typed values: numbers, booleans and strings never equal one another.
            meta["level"] = [i % 5, float(i % 5) + 0.5, str(i % 5), bool(i % 2)][i % 4]
        if i % 7 == 0:
            meta["tags"] = sorted({f"g{i % 4}", f"g{i % 6}"})
        rows.append({"chunk_id": f"c{(i * 7919) % ROWS:05d}", "doc_id": f"d{i // 5:04d}", "meta": meta})
    return rows, vectors


def _table(folder: Path, rows: list[dict[str, Any]], vectors: npt.NDArray[np.float32]) -> Any:
    data = pa.table(
        {
            "chunk_id": [r["chunk_id"] for r in rows],
            "doc_id": [r["doc_id"] for r in rows],
            "metadata_json": [json.dumps(r["meta"], sort_keys=True) for r in rows],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), type=pa.float32()), DIMS),
        }
    )
    return lancedb.connect(str(folder)).create_table("t", data)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExactMatrix, Any, list[dict[str, Any]], Any]:
    folder = tmp_path_factory.mktemp("exact")
    rows, vectors = _rows(np.random.default_rng(11))
    table = _table(folder / "db", rows, vectors)
    store = MatrixStore(folder / "exact", folder / "db" / "t.lance" / "_versions")
    matrix = store.build(table)
    assert matrix is not None, store.unavailable
    return matrix, table, rows, vectors


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    """What a pushed filter is checked against on a hit (race/run/answers.py): metadata, identity."""
    meta = {k: tuple(v) if isinstance(v, list) else v for k, v in row["meta"].items()}
    return {**meta, "doc_id": row["doc_id"], "chunk_id": row["chunk_id"]}


def reference(
    rows: list[dict[str, Any]],
    vectors: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
    filters: list[Filter],
    k: int,
) -> tuple[list[str], list[float], int]:
    """The float64 top-k: 1 - cosine from the float32 vectors, rounded once to float32, ties by
    chunk_id; rows without a direction are not ranked but are counted."""
    keep = [i for i, r in enumerate(rows) if all(f.matches(_fields(r)) for f in filters)]
    wide = vectors.astype(np.float64)
    q = query.astype(np.float64)
    norms = np.linalg.norm(wide, axis=1)
    ranked = []
    for i in keep:
        if norms[i] == 0.0:
            continue
        cosine = float(np.dot(wide[i], q)) / (norms[i] * float(np.linalg.norm(q)))
        ranked.append((float(np.float32(min(2.0, max(0.0, 1.0 - cosine)))), rows[i]["chunk_id"]))
    ranked.sort()
    return [c for _, c in ranked[:k]], [d for d, _ in ranked[:k]], len(keep)


def _ids(matrix: ExactMatrix, positions: npt.NDArray[np.int64]) -> list[str]:
    return [str(c) for c in matrix.table.column("chunk_id").take(pa.array(positions)).to_pylist()]


FILTERS: list[list[Filter]] = [
    [],
    *[[Filter(field="tiny", value=f"t{size:02d}")] for size in range(1, 13)],
    [Filter(field="tiny", value="t01z")],  # its one row has no direction
    [Filter(field="share", value="p01")],
    [Filter(field="share", value="p10")],
    [Filter(field="share", value="p50")],
    [Filter(field="share", value="none-such")],
    [Filter(field="no_such_field", value="x")],
    [Filter(field="share", op=FilterOp.IN, values=("p01", "p10"))],
    [Filter(field="share", value="p50"), Filter(field="day", op=FilterOp.RANGE, gte="2024-03-01", lte="2024-06-30")],
    [Filter(field="day", op=FilterOp.RANGE, gte="2024-11-01")],
    [Filter(field="day", op=FilterOp.RANGE, lte="2024-01-31")],
    [Filter(field="level", value=3)],
    [Filter(field="level", value="3")],
    [Filter(field="level", value=3.5)],
    [Filter(field="level", value=True)],
    [Filter(field="level", value=1)],
    [Filter(field="level", op=FilterOp.RANGE, gte=1, lte=2.5)],
    [Filter(field="level", op=FilterOp.RANGE, gte="1", lte=3)],  # bounds of two classes: nothing
    [Filter(field="level", op=FilterOp.IN, values=(1, "1", True, 4.5))],
    [Filter(field="tags", value="g1")],
    [Filter(field="tags", op=FilterOp.IN, values=("g0", "g5"))],
    [Filter(field="doc_id", op=FilterOp.IN, values=("d0001", "d0100", "d0599"))],
    [Filter(field="chunk_id", op=FilterOp.IN, values=("c00005", "c00011", "c02999", "c99999"))],
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda fs: "+".join(f.describe() for f in fs) or "unfiltered")
def test_top_k_is_the_float64_reference(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any], filters: list[Filter]
) -> None:
    matrix, _, rows, vectors = synthetic
    rng = np.random.default_rng(len(filters) * 31 + len(str(filters)))
    for query in (*rng.standard_normal((4, DIMS)).astype(np.float32), vectors[5]):
        ranking = matrix.search(query, filters, K)
        ids, distances, matching = reference(rows, vectors, query, filters, K)
        assert ranking.total_matches == matching
        assert _ids(matrix, ranking.positions) == ids
        np.testing.assert_allclose(ranking.distances, distances, rtol=0, atol=2.0**-23)
        assert np.isfinite(ranking.distances).all()


@pytest.mark.parametrize("filters", FILTERS, ids=lambda fs: "+".join(f.describe() for f in fs) or "unfiltered")
def test_a_few_rows_scored_at_once_give_the_two_pass_bytes(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any],
    filters: list[Filter],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Up to ``DIRECT_ROWS`` selected rows are scored in float64 at once; the float32 pass and
    its settling give the same rows, distances and order (and the reverse for larger ones)."""
    matrix, _, _, vectors = synthetic
    queries = (*np.random.default_rng(12).standard_normal((3, DIMS)).astype(np.float32), vectors[5])
    for k in (1, K, 40):
        monkeypatch.setattr(exact_module, "DIRECT_ROWS", 0)
        two_pass = [matrix.search(q, filters, k) for q in queries]
        monkeypatch.setattr(exact_module, "DIRECT_ROWS", ROWS)
        direct = [matrix.search(q, filters, k) for q in queries]
        for a, b in zip(two_pass, direct, strict=True):
            assert a.positions.tobytes() == b.positions.tobytes() and a.total_matches == b.total_matches
            assert a.distances.tobytes() == b.distances.tobytes()


def test_filter_masks_are_filter_matches(synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any]) -> None:
    """Random filters of every op and operand type select exactly the rows ``Filter.matches`` admits."""
    matrix, _, rows, _ = synthetic
    rng = np.random.default_rng(5)
    ids = _ids(matrix, np.arange(matrix.rows))
    operands: list[Any] = [0, 1, 2, 3, 4, 0.5, 2.5, "0", "3", True, False, "p01", "p50", "g2", "t03", "2024-05-05"]
    fields = ["share", "tiny", "level", "tags", "day", "doc_id"]
    for _ in range(400):
        field = str(rng.choice(fields))
        op = rng.integers(3)
        picks = [operands[int(i)] for i in rng.choice(len(operands), size=3, replace=False)]
        if op == 0:
            flt = Filter(field=field, value=picks[0])
        elif op == 1:
            flt = Filter(field=field, op=FilterOp.IN, values=tuple(picks))
        else:
            shape = rng.integers(3)
            low, high = (picks[0], picks[1]) if shape == 0 else (picks[0], None) if shape == 1 else (None, picks[1])
            flt = Filter(field=field, op=FilterOp.RANGE, gte=low, lte=high)
        positions, count = matrix.select([flt])
        got = sorted(ids[p] for p in (range(matrix.rows) if positions is None else positions.tolist()))
        expected = sorted(r["chunk_id"] for r in rows if flt.matches(_fields(r)))
        assert got == expected, flt.describe()
        assert count == len(expected)


def test_ties_are_broken_by_key_and_rows_without_direction_never_rank(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any],
) -> None:
    matrix, _, rows, vectors = synthetic
    ranking = matrix.search(vectors[5], [], 4)
    tied = sorted(rows[i]["chunk_id"] for i in (5, 11, 13, 17))
    assert _ids(matrix, ranking.positions) == tied
    assert len(set(ranking.distances.tolist())) == 1
    everything = matrix.search(vectors[5], [], ROWS)
    assert len(everything.positions) == ROWS - 1 and everything.total_matches == ROWS
    assert rows[7]["chunk_id"] not in _ids(matrix, everything.positions)
    assert np.isfinite(everything.distances).all() and (np.diff(everything.distances) >= 0).all()


def test_tiny_filters_never_give_a_non_finite_distance(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any],
) -> None:
    matrix, _, _, _ = synthetic
    rng = np.random.default_rng(3)
    for size in range(1, 13):
        for query in rng.standard_normal((5, DIMS)).astype(np.float32):
            ranking = matrix.search(query, [Filter(field="tiny", value=f"t{size:02d}")], K)
            assert len(ranking.positions) == min(K, size) and ranking.total_matches == size
            assert np.isfinite(ranking.distances).all()
    lone = matrix.search(rng.standard_normal(DIMS).astype(np.float32), [Filter(field="tiny", value="t01z")], K)
    assert len(lone.positions) == 0 and lone.total_matches == 1
    with pytest.raises(BackendUnavailable, match="no direction"):
        matrix.search(np.zeros(DIMS, dtype=np.float32), [], K)
    with pytest.raises(BackendUnavailable, match="no direction"):
        matrix.search(np.full(DIMS, np.nan, dtype=np.float32), [], K)


def test_a_rows_distance_does_not_depend_on_the_rows_asked_with_it(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any],
) -> None:
    """Random access (a chunk_id IN filter) gives each row the bits sorted access gave it."""
    matrix, _, _, _ = synthetic
    query = np.random.default_rng(8).standard_normal(DIMS).astype(np.float32)
    deep = matrix.search(query, [], 200)
    sorted_access = dict(zip(_ids(matrix, deep.positions), deep.distances.tolist(), strict=True))
    asked = list(sorted_access)[::7]
    for group in (asked, asked[:1], asked[3:9]):
        found = matrix.search(query, [Filter(field="chunk_id", op=FilterOp.IN, values=tuple(group))], len(group))
        got = dict(zip(_ids(matrix, found.positions), found.distances.tolist(), strict=True))
        assert got == {key: sorted_access[key] for key in group}


def test_a_sorted_copy_scores_every_row_with_the_matrix_bits(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any],
) -> None:
    """A search settles its cut in the space it scored (a sorted copy's rows are still in the
    cache): each row's float64 distance there is the bits the matrix itself gives it."""
    matrix, _, _, _ = synthetic
    query = np.random.default_rng(9).standard_normal(DIMS)
    q_norm = float(np.linalg.norm(query))
    assert matrix.copies
    for name in matrix.copies:
        space = matrix._spaces[name]
        assert space.to_base is not None
        directed = np.flatnonzero(space.directed)  # a row without a direction has no distance
        got = space.distances(directed, query, q_norm)
        assert got.tobytes() == matrix.distances(space.to_base[directed], query, q_norm).tobytes(), name


@pytest.mark.parametrize("exponent", [-60, -17, -3, 0, 5, 16, 17, 60])
def test_a_querys_norm_changes_no_bit(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any], exponent: int
) -> None:
    """A query of moderate norm is scored as it is, a very long or short one normalised first:
    a power-of-two multiple of a query (the same direction, exactly) gives the same bytes."""
    matrix, _, _, _ = synthetic
    query = np.random.default_rng(10).standard_normal(DIMS).astype(np.float32)
    scaled = query * np.float32(2.0**exponent)
    for filters in ([], [Filter(field="share", value="p01")], [Filter(field="tiny", value="t12")]):
        want, got = matrix.search(query, filters, K), matrix.search(scaled, filters, K)
        assert got.positions.tobytes() == want.positions.tobytes()
        assert got.distances.tobytes() == want.distances.tobytes()


def test_selections_are_kept_per_typed_filter(synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any]) -> None:
    """Filter equality has True == 1; the kept selections do not confuse them."""
    matrix, _, rows, _ = synthetic
    for value in (True, 1, 1.0, "1", True):
        flt = Filter(field="level", value=value)
        assert matrix.select([flt])[1] == sum(1 for r in rows if flt.matches(_fields(r))), repr(value)


def test_distances_of_384_d_rows_do_not_depend_on_their_batch(session_engine: Engine) -> None:
    adapter = session_engine.adapters["lancedb"]
    matrix = adapter._exact.serving(adapter.snapshot().version)
    assert matrix is not None and matrix.dims == 384
    rng = np.random.default_rng(4)
    query = rng.standard_normal(384)
    every = matrix.distances(np.arange(matrix.rows), query, float(np.linalg.norm(query)))
    for size in (1, 2, 3, 5, 11, 64):
        picked = rng.choice(matrix.rows, size=size, replace=False)
        assert matrix.distances(picked, query, float(np.linalg.norm(query))).tolist() == every[picked].tolist()


def test_candidates_margin_covers_float32_error() -> None:
    assert margin(384) > 384 * 2.0**-24 * 2


def test_cluster_field_is_the_lowest_cardinality_common_field() -> None:
    rows = [{"chunk_id": str(i), "doc_id": "d", "a": i % 3, "b": i % 2, "rare": 1 if i == 0 else 0} for i in range(10)]
    assert cluster_field(rows) == "b"
    assert cluster_field([{"chunk_id": "x", "doc_id": "y"}]) is None


def test_the_matrix_is_not_served_for_another_version_or_another_table(tmp_path: Path) -> None:
    rows, vectors = _rows(np.random.default_rng(2))
    table = _table(tmp_path / "db", rows[:200], vectors[:200])
    versions = tmp_path / "db" / "t.lance" / "_versions"
    store = MatrixStore(tmp_path / "exact", versions)
    built = store.build(table)
    assert built is not None and store.serving(table.version) is built
    before = table.version
    table.delete("chunk_id = 'c00000'")
    assert table.version != before
    assert store.serving(table.version) is None and store.serving(before) is built
    # The same version number of a table created anew names other contents: not served.
    lancedb.connect(str(tmp_path / "db")).drop_table("t")
    again = _table(tmp_path / "db", rows[200:400], vectors[200:400])
    assert again.version == before
    assert store.serving(again.version) is None
    rebuilt = store.build(again)
    assert rebuilt is not None and store.serving(again.version) is rebuilt
    assert sorted(p.name for p in (tmp_path / "exact").iterdir()) == [rebuilt.folder.name]


def test_duplicate_chunk_ids_leave_no_matrix(tmp_path: Path) -> None:
    rows, vectors = _rows(np.random.default_rng(2))
    rows = [*rows[:20], {**rows[20], "chunk_id": rows[3]["chunk_id"]}]
    table = _table(tmp_path / "db", rows, vectors[:21])
    store = MatrixStore(tmp_path / "exact", tmp_path / "db" / "t.lance" / "_versions")
    assert store.build(table) is None and "not unique" in store.unavailable
    assert store.serving(table.version) is None


# -- through the adapter, on the fixture index ----------------------------------------------------


def _request(mode: str, rsc: str, *, k: int = 5, pushed: tuple[Filter, ...] = (), **params: Any) -> ScanRequest:
    return ScanRequest(
        obligation="o",
        rsc_id=rsc,
        rsc_version="1.0.0",
        backend="lancedb",
        mode=mode,
        query=Query(text="the broker ran out of memory and was killed"),
        k=k,
        pushed=pushed,
        params=params,
    )


def _exact(adapter: Any, **kwargs: Any) -> ScanResult:
    return anyio.run(adapter.scan, _request(MODE_EXACT, "lancedb.exact_matrix", **kwargs))


def _flat(adapter: Any, **kwargs: Any) -> ScanResult:
    return anyio.run(adapter.scan, _request("vector_flat", "lancedb.flat_prefilter", **kwargs))


CONFORMANCE = json.loads((FIXTURES / "cases" / "conformance.json").read_text())["contracts"]


@pytest.mark.parametrize("k", [1, 5, 40, 10_000])
def test_adapter_answers_as_lancedb_flat_does(session_engine: Engine, k: int) -> None:
    adapter = session_engine.adapters["lancedb"]
    filters = [Filter.model_validate(f) for f in CONFORMANCE["lancedb.flat_prefilter"]["filters"]]
    for pushed in [(), *((f,) for f in filters), tuple(filters[:2])]:
        exact, flat = _exact(adapter, k=k, pushed=pushed), _flat(adapter, k=k, pushed=pushed)
        assert [h.key for h in exact.hits] == [h.key for h in flat.hits]
        np.testing.assert_allclose(
            [h.custody.score for h in exact.hits], [h.custody.score for h in flat.hits], rtol=0, atol=2.0**-22
        )
        assert [h.custody.rank for h in exact.hits] == list(range(1, len(exact.hits) + 1))
        assert exact.total_matches == flat.total_matches and exact.exhausted == flat.exhausted
        assert all(h.custody.rsc == "lancedb.exact_matrix@1.0.0" for h in exact.hits)
        assert [h.model_dump(exclude={"custody"}) for h in exact.hits] == [
            h.model_dump(exclude={"custody"}) for h in flat.hits
        ]


def _late_note(index: Path) -> None:
    """A row written to the table by another handle: a new table version."""
    corpus = load_corpus(BUNDLED_CORPUS)
    late = Chunk(
        **{
            **corpus.chunks[0].model_dump(),
            "chunk_id": "late-note#0",
            "doc_id": "late-note",
            "title": "Late note",
            "section": "",
            "text": "The broker ran out of memory and the kernel killed it at noon.",
            "metadata": {"doc_id": "late-note", "doc_type": "incident"},
        }
    )
    writer = lancedb.connect(str(index / "lancedb")).open_table(TABLE)
    writer.add(chunk_rows([late], MiniLMEmbedder().embed([chunk_text(late)]), corpus.revision, 384))


def test_a_matrix_is_never_served_for_another_table_version(tmp_path: Path, index_dir: Path) -> None:
    index = tmp_path / "index"
    shutil.copytree(index_dir, index)
    adapter = LanceAdapter.open(index)
    before = adapter._exact.serving(adapter.snapshot().version)
    assert before is not None
    _late_note(index)
    version = adapter.snapshot().version
    assert adapter._exact.serving(version) is None
    # The scan builds the matrix of the new version first, then answers from it.
    served = _exact(adapter, k=3)
    assert served.hits[0].chunk_id == "late-note#0"
    assert [h.key for h in served.hits] == [h.key for h in _flat(adapter, k=3).hits]
    assert served.total_matches == before.rows + 1
    now = adapter._exact.serving(version)
    assert now is not None and now.rows == before.rows + 1 and now.folder != before.folder
    assert [p.name for p in (index / "lancedb" / EXACT_DIR).iterdir()] == [now.folder.name]
    # An engine opened now gives the same bytes as the one that saw the write.
    reopened = LanceAdapter.open(index)
    assert _exact(reopened, k=3) == served


def test_without_a_matrix_of_the_snapshot_the_flat_scan_answers(
    tmp_path: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    shutil.copytree(index_dir, index)
    adapter = LanceAdapter.open(index)
    _late_note(index)

    def unwritable(*args: Any) -> None:
        raise OSError("read-only index directory")

    monkeypatch.setattr("backends.lancedb.matrix_store.write_matrix", unwritable)
    served = _exact(adapter, k=3)
    assert adapter._exact.serving(adapter.snapshot().version) is None
    assert "read-only" in adapter._exact.unavailable
    assert served.hits[0].chunk_id == "late-note#0"
    assert [h.key for h in served.hits] == [h.key for h in _flat(adapter, k=3).hits]


@pytest.mark.parametrize("damage", ["truncate", "foreign"])
def test_a_damaged_matrix_is_written_again_from_the_table(tmp_path: Path, index_dir: Path, damage: str) -> None:
    """A matrix file that cannot be read back is derived data: the first scan writes the
    matrix again, and the answer has the bytes of an intact index."""
    intact = LanceAdapter.open(index_dir)
    want = _exact(intact, k=5)
    index = tmp_path / "index"
    shutil.copytree(index_dir, index)
    (folder,) = (index / "lancedb" / EXACT_DIR).iterdir()
    copy = sorted(folder.glob("sorted-*.npy"))[0]
    if damage == "truncate":
        copy.write_bytes(copy.read_bytes()[: copy.stat().st_size // 2])
    else:
        np.save(copy, np.zeros((3, 2), dtype=np.float64))
    with pytest.raises(ValueError):
        ExactMatrix(folder)
    adapter = LanceAdapter.open(index)
    got = _exact(adapter, k=5)
    assert adapter._exact.serving(adapter.snapshot().version) is not None and not adapter._exact.unavailable
    assert [(h.key, h.custody.score) for h in got.hits] == [(h.key, h.custody.score) for h in want.hits]
    ExactMatrix(folder)  # readable again


@pytest.mark.parametrize(
    "flt",
    [
        Filter(field="share", value="p10"),
        Filter(field="level", value=3),
        Filter(field="tiny", value="t05"),
        Filter(field="tags", value="g1"),
        Filter(field="day", op=FilterOp.RANGE, gte="2024-03-01", lte="2024-06-30"),
        Filter(field="doc_id", op=FilterOp.IN, values=("d0001", "d0002", "d0003")),
    ],
    ids=lambda f: f.describe(),
)
def test_a_filter_on_any_field_reads_one_run_of_rows(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any], flt: Filter
) -> None:
    """The cluster field's values are runs of the matrix; every other field's, runs of its
    sorted copy: a value (or a range of values, or consecutive values) is one run, read in
    place, and the run holds exactly the rows the filter admits."""
    matrix, _, rows, _ = synthetic
    assert matrix.cluster == "share"
    found = matrix.selection([flt])
    assert found.space == (None if flt.field == matrix.cluster else flt.field)
    assert found.runs is not None and len(found.runs) == 1
    start, stop = (int(v) for v in found.runs[0])
    in_base = np.arange(start, stop) if found.space is None else matrix.columns[flt.field].order[start:stop]
    expected = sorted(r["chunk_id"] for r in rows if flt.matches(_fields(r)))
    assert sorted(_ids(matrix, in_base)) == expected and found.matching == len(expected)


def test_a_conjunction_gathers_the_rows_of_its_narrowest_filter(
    synthetic: tuple[ExactMatrix, Any, list[dict[str, Any]], Any],
) -> None:
    matrix, _, rows, vectors = synthetic
    filters = [Filter(field="level", op=FilterOp.RANGE, gte=0, lte=4), Filter(field="tiny", value="t12")]
    found = matrix.selection(filters)
    assert found.space == "tiny" and found.runs is None and found.positions is not None
    query = vectors[3]
    ranking = matrix.search(query, filters, K)
    ids, distances, matching = reference(rows, vectors, query, filters, K)
    assert _ids(matrix, ranking.positions) == ids and ranking.total_matches == matching
    np.testing.assert_allclose(ranking.distances, distances, rtol=0, atol=2.0**-23)


def test_the_matrix_is_gathered_chunk_by_chunk_in_the_rows_order(tmp_path: Path) -> None:
    """``write_matrix`` reads the table's vectors batch by batch from a scan of their own (nulls
    as zeros), refusing a scan whose rows are not the row scan's, and writes each sorted copy a
    block at a time: the arrays and bytes of a whole-copy gather."""
    from backends.lancedb.matrix import GATHER_ROWS, _gather_vectors, _write_sorted

    rng = np.random.default_rng(13)
    vectors = rng.standard_normal((50, 6)).astype(np.float32)
    rows: list[list[float] | None] = [list(map(float, v)) for v in vectors]
    rows[3] = rows[41] = None
    ids = [f"c{i:02d}" for i in range(50)]
    scan = pa.table({"chunk_id": ids, "vector": pa.array(rows, type=pa.list_(pa.float32(), 6))})
    batches = [scan.slice(0, 7), scan.slice(7, 30), scan.slice(37)]
    order = rng.permutation(50).tolist()
    expected = np.array([[0.0] * 6 if rows[p] is None else rows[p] for p in order], dtype=np.float32)
    got = _gather_vectors((b.combine_chunks().to_batches()[0] for b in batches), scan.column("chunk_id"), order, 6)
    assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()
    shuffled = ids[:7] + ids[8:9] + ids[7:8] + ids[9:]
    with pytest.raises(ValueError, match=r"rows 7\.\.37 are not the row scan's"):
        _gather_vectors((b.combine_chunks().to_batches()[0] for b in batches), pa.chunked_array([shuffled]), order, 6)
    with pytest.raises(ValueError, match="has 37 rows, the row scan 50"):
        _gather_vectors((b.combine_chunks().to_batches()[0] for b in batches[:2]), scan.column("chunk_id"), order, 6)
    many = rng.standard_normal((2 * GATHER_ROWS + 5, 3)).astype(np.float32)
    permutation = rng.permutation(len(many))
    np.save(tmp_path / "whole.npy", many[permutation])
    _write_sorted(tmp_path / "blocks.npy", many, permutation)
    assert (tmp_path / "blocks.npy").read_bytes() == (tmp_path / "whole.npy").read_bytes()
