"""RACE from Python in one line: ``engine.search`` is the one-obligation plan a user would write,
run as any plan; a receipt becomes rows (records, Arrow, pandas) with its gaps beside them; an
engine opens from a string, closes as a context manager, and its ``*_sync`` calls share one loop."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from race import Engine
from race.search import Field, plan_for_search
from rsc import InputError, PlanError
from tests.faults.injector import FaultyAdapter, raise_task


def test_the_three_lines_of_the_readme(index_dir: Path) -> None:
    with Engine.open(str(index_dir)) as engine:
        receipt = engine.search_sync("the broker ran out of memory", k=5, where={"doc_type": "advisory"})
    frame = receipt.to_pandas()
    assert len(frame) == len(receipt.to_records()) > 0
    assert set(frame["rank"]) == {item.rank for item in receipt.evidence}
    assert json.loads(frame["metadata"][0])["doc_type"] == "advisory"
    assert frame.attrs["obligations"] == {"q": "satisfied"}


def test_search_is_the_plan_a_user_would_write(session_engine: Engine) -> None:
    written = {
        "schema_version": "race.plan/1",
        "root": "q",
        "obligations": [
            {
                "id": "q",
                "kind": "seek_support",
                "query": {"text": "SCRAM authentication bypass"},
                "query_class": "lexical",
                "k": 3,
                "hard_filters": [{"field": "doc_type", "op": "eq", "value": "advisory"}],
            }
        ],
    }
    made = plan_for_search("SCRAM authentication bypass", k=3, strategy="lexical", where={"doc_type": "advisory"})
    assert made == written
    by_search = session_engine.search_sync(
        "SCRAM authentication bypass", k=3, strategy="lexical", where={"doc_type": "advisory"}
    )
    by_run = session_engine.run_sync(written)
    assert by_search.normalized_bytes() == by_run.normalized_bytes()
    assert session_engine.plan_for_search("x", strategy="lexical").obligations[0].query_class.value == "lexical"


def test_three_ways_to_say_where_give_one_plan() -> None:
    expression = (
        (Field("doc_type") == "advisory")
        & Field("version").isin(["1.2", "1.3"])
        & Field("date").between("2024-01-01", "2024-12-31")
    )
    dicts = [
        {"field": "doc_type", "op": "eq", "value": "advisory"},
        {"field": "version", "op": "in", "values": ["1.2", "1.3"]},
        {"field": "date", "op": "range", "gte": "2024-01-01", "lte": "2024-12-31"},
    ]
    assert plan_for_search("x", where=expression) == plan_for_search("x", where=dicts)
    shorthand = plan_for_search("x", where={"doc_type": "advisory", "version": ["1.2", "1.3"]})
    assert shorthand["obligations"][0]["hard_filters"] == dicts[:2]


def test_every_hit_of_a_filtered_search_satisfies_the_filter(session_engine: Engine) -> None:
    receipt = session_engine.search_sync(
        "release notes and fixes", k=20, where=Field("date") >= "2024-06-01", strategy="hybrid"
    )
    rows = receipt.to_records()
    assert rows
    for row in rows:
        assert json.loads(row["metadata"])["date"] >= "2024-06-01"


@pytest.mark.parametrize(
    ("call", "where"),
    [
        (lambda e: e.search_sync("   "), "text"),
        (lambda e: e.search_sync("x", strategy="fuzzy"), "strategy"),
        (lambda e: e.search_sync("x", index="nowhere"), "index"),
        (lambda e: e.search_sync("x", where="doc_type = advisory"), "where"),
        (lambda e: e.search_sync("x", where={"doc_type": {"a": 1}}), "where"),
    ],
)
def test_bad_search_input_is_one_error_naming_the_argument(session_engine: Engine, call, where: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError) as raised:
        call(session_engine)
    assert raised.value.where == where


def test_index_limits_a_search_to_one_backend(session_engine: Engine) -> None:
    receipt = session_engine.search_sync("broker memory", index="tantivy")
    assert {row["backend"] for row in receipt.to_records()} == {"tantivy"}


def test_rows_keep_every_hit_with_its_custody_and_the_gaps_travel_beside(index_dir: Path) -> None:
    opened = Engine.open(index_dir)
    adapters = dict(opened.adapters)
    adapters["lancedb"] = FaultyAdapter(inner=adapters["lancedb"], faults={"q": raise_task(RuntimeError("disk gone"))})
    engine = Engine(adapters)
    receipt = engine.search_sync("the broker ran out of memory", k=5)
    assert [g.kind.value for g in receipt.gaps] == ["backend_error"]
    rows = receipt.to_records()
    assert len(rows) == sum(len(item.hits) for item in receipt.evidence)
    first = receipt.evidence[0].hits[0]
    assert rows[0]["chunk_id"] == first.chunk_id and rows[0]["score"] == first.custody.score
    assert rows[0]["hit_rank"] == first.custody.rank and rows[0]["rsc"] == first.custody.rsc
    table = receipt.to_arrow()
    assert isinstance(table, pa.Table) and table.num_rows == len(rows)
    assert table.to_pylist() == rows
    gaps = json.loads(table.schema.metadata[b"race.gaps"])
    assert [g["kind"] for g in gaps] == ["backend_error"] and "disk gone" in gaps[0]["detail"]
    frame = receipt.to_pandas()
    assert frame.attrs["gaps"][0]["kind"] == "backend_error"
    assert frame.to_dict("records")[0]["chunk_id"] == rows[0]["chunk_id"]


def test_an_empty_answer_is_an_empty_table_with_its_columns(session_engine: Engine) -> None:
    receipt = session_engine.search_sync("x", strategy="lexical", where={"doc_type": "no-such-type"})
    assert receipt.to_records() == []
    assert receipt.to_arrow().num_rows == 0 and "rank" in receipt.to_arrow().column_names
    assert list(receipt.to_pandas().columns)[:2] == ["rank", "key"]


def test_a_plan_is_a_path_as_str_or_pathlike_and_json_text_is_bytes(session_engine: Engine, tmp_path: Path) -> None:
    plan = plan_for_search("broker memory", strategy="lexical")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    by_str = session_engine.run_sync(str(path))
    assert by_str.normalized_bytes() == session_engine.run_sync(path).normalized_bytes()
    assert by_str.normalized_bytes() == session_engine.run_sync(json.dumps(plan).encode()).normalized_bytes()
    with pytest.raises(PlanError, match="give JSON text as bytes"):
        session_engine.run_sync(json.dumps(plan))
    with pytest.raises(PlanError, match="cannot read"):
        session_engine.run_sync(str(tmp_path / "missing.json"))


def test_sync_calls_share_one_loop_and_close_stops_it(index_dir: Path) -> None:
    seen: list[str] = []

    async def where_am_i() -> None:
        seen.append(threading.current_thread().name)

    engine = Engine.open(index_dir)
    engine.search_sync("broker", strategy="lexical")
    engine._portal.call(where_am_i)
    engine._portal.call(where_am_i)
    assert seen == ["race-engine", "race-engine"]
    serving = engine._portal._serving
    assert serving is not None and serving.thread.is_alive()
    thread = serving.thread
    engine.close()
    assert not thread.is_alive()
    engine.close()  # twice is harmless


@pytest.mark.anyio
async def test_an_engine_is_an_async_context_manager(index_dir: Path) -> None:
    async with Engine.open(index_dir) as engine:
        receipt = await engine.search("broker memory", strategy="lexical", k=2)
    assert len(receipt.evidence) == 2


def test_the_readme_search_example_runs_as_written(index_dir: Path, tmp_path: Path) -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    tour = readme[readme.index("**3. Search from Python.**") :]
    code = tour[tour.index("```python\n") + len("```python\n") : tour.index("```\n", tour.index("```python\n") + 10)]
    assert "engine.search_sync(" in code and "to_pandas()" in code
    (tmp_path / "notes-index").symlink_to(index_dir)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["rank", "source_path", "line_start", "line_end", "rsc", "score"]
    assert len(lines) >= 5 and lines[-1].startswith("gaps: ")  # at least one row per item of k=3
