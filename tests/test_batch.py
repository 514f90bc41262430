"""Batch plans on one local engine: `Engine.run_many` and `race batch`."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import anyio
import orjson
import pytest

from race.cli.main import main
from race.engine import Engine
from race.evaluation.batch import PlanFailure, plan_lines, receipt_of, run_outcomes
from race.receipt import Receipt
from tests.conftest import FIXTURES, roomy_plan

PLANS = sorted((FIXTURES / "plans").glob("*.json"))


BAD_LINES = [
    b'{"id": "no-obligations", "plan": {"schema_version": "race.plan/1"}}',
    b"not json at all",
]


def sequential(index_dir: Path, plans: list[Path]) -> list[bytes]:
    """Each plan run alone, one after another, on a fresh engine: what a batch must equal."""
    engine = Engine.open(index_dir)
    return [engine.run_sync(roomy_plan(plan)).normalized_bytes() for plan in plans]


@pytest.fixture(scope="module")
def one_by_one(index_dir: Path) -> list[bytes]:
    return sequential(index_dir, PLANS)


def write_plans(path: Path, extra: list[bytes] = BAD_LINES) -> list[bytes]:
    lines = [orjson.dumps(roomy_plan(plan)) for plan in PLANS] + extra
    path.write_bytes(b"\n".join(lines) + b"\n")
    return lines


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_run_many_equals_one_by_one_runs_and_keeps_failures_in_place(index_dir: Path, one_by_one: list[bytes]) -> None:
    engine = Engine.open(index_dir)
    plans: list[object] = [*map(roomy_plan, PLANS[:3]), b"not json", *map(roomy_plan, PLANS[3:])]
    outcomes = engine.run_many_sync(plans, concurrency=4)  # type: ignore[arg-type]
    assert len(outcomes) == len(plans)
    failed = outcomes.pop(3)
    assert isinstance(failed, PlanFailure) and failed.kind == "bad_input" and "malformed JSON" in failed.message
    assert all(isinstance(o, Receipt) for o in outcomes)
    assert [o.normalized_bytes() for o in outcomes if isinstance(o, Receipt)] == one_by_one


def test_outcomes_are_emitted_in_order_whatever_order_they_finish() -> None:
    delays = [random.Random(7).random() / 50 for _ in range(40)]
    running = 0
    most = 0
    emitted: list[int] = []

    async def run(index: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(delays[index])
        running -= 1
        return index * 10

    def emit(index: int, value: int) -> None:
        assert value == index * 10
        emitted.append(index)

    anyio.run(lambda: run_outcomes(run, len(delays), concurrency=3, emit=emit))
    assert emitted == list(range(len(delays)))
    assert most == 3


def test_batch_writes_one_record_per_plan_line_with_receipts_equal_to_one_by_one_runs(
    index_dir: Path, one_by_one: list[bytes], tmp_path: Path
) -> None:
    plans, out = tmp_path / "plans.jsonl", tmp_path / "receipts.jsonl"
    write_plans(plans)
    # Two plan lines are bad input: they get error records, and the batch exits 2.
    assert main(["batch", str(plans), "--out", str(out), "--index", str(index_dir), "--concurrency", "3"]) == 2
    got = records(out)
    assert [r["line"] for r in got] == list(range(1, len(PLANS) + len(BAD_LINES) + 1))
    assert all(r["schema_version"] == "race.batch/1" for r in got)
    receipts = [receipt_of(r) for r in got[: len(PLANS)]]
    assert [r.normalized_bytes() for r in receipts if r is not None] == one_by_one
    no_obligations, not_json = got[len(PLANS) :]
    assert no_obligations["id"] == "no-obligations" and "id" not in not_json
    for record in (no_obligations, not_json):
        error = record["error"]
        assert isinstance(error, dict) and error["kind"] == "bad_input" and error["type"] == "PlanError"
        assert str(error["message"]).startswith(f"{plans}:{record['line']}: ")
        assert "\n" not in str(error["message"])


def test_batch_resumes_keeping_receipts_and_redoing_errors_torn_and_changed_lines(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plans, out = tmp_path / "plans.jsonl", tmp_path / "receipts.jsonl"
    first = PLANS[:4]
    lines = [orjson.dumps(roomy_plan(p)) for p in first]
    plans.write_bytes(b"\n".join([*lines, b"not json"]) + b"\n")
    args = ["batch", str(plans), "--out", str(out), "--index", str(index_dir)]
    assert main(args) == 2
    written = out.read_bytes().splitlines(keepends=True)
    assert len(written) == 5
    # A crash mid-write leaves a torn last line; line 3 of the plans changes; line 5 is fixed.
    out.write_bytes(b"".join(written[:3]) + written[3][: len(written[3]) // 2])
    lines[2] = orjson.dumps(roomy_plan(PLANS[5]))
    plans.write_bytes(b"\n".join([*lines, orjson.dumps(roomy_plan(PLANS[6]))]) + b"\n")
    capsys.readouterr()
    assert main(args) == 0
    assert "2 already in" in capsys.readouterr().err
    again = out.read_bytes().splitlines(keepends=True)
    # Lines 1 and 2 kept byte for byte (operational timings included: they were not re-run).
    assert again[:2] == written[:2]
    assert [json.loads(r)["line"] for r in again] == [1, 2, 3, 4, 5]
    expected = sequential(index_dir, [first[0], first[1], PLANS[5], first[3], PLANS[6]])
    got = [receipt_of(orjson.loads(r)) for r in again]
    assert [r.normalized_bytes() for r in got if r is not None] == expected
    # Everything answered: a third run writes nothing.
    assert main(args) == 0
    assert out.read_bytes().splitlines(keepends=True) == again


def test_batch_exits_3_when_a_receipt_leaves_a_mandatory_obligation_unsatisfied(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``race run`` does, for every receipt of the output file: written now or kept from before."""
    plans, out = tmp_path / "plans.jsonl", tmp_path / "receipts.jsonl"
    met, unmet = FIXTURES / "plans" / "cascade_lexical.json", FIXTURES / "plans" / "postfilter_exhaustive.json"
    plans.write_bytes(b"\n".join(orjson.dumps(roomy_plan(p)) for p in (met, unmet)) + b"\n")
    args = ["batch", str(plans), "--out", str(out), "--index", str(index_dir)]
    for _ in range(2):  # the second run only reads the receipts back
        assert main(args) == 3
        err = capsys.readouterr().err
        assert "1 with mandatory obligations not satisfied" in err
        assert "race: line 2: mandatory obligations not satisfied: o (unsatisfied)" in err
    optional = roomy_plan(unmet)
    optional["obligations"][0]["mandatory"] = False
    plans.write_bytes(orjson.dumps(roomy_plan(met)) + b"\n" + orjson.dumps(optional) + b"\n")
    assert main(args) == 0


def test_batch_bad_input_writes_nothing(index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "receipts.jsonl"
    plans = tmp_path / "plans.jsonl"
    write_plans(plans, extra=[])
    for argv, where in (
        (["batch", str(tmp_path / "absent.jsonl"), "--out", str(out), "--index", str(index_dir)], "absent.jsonl"),
        (["batch", str(plans), "--out", str(out), "--index", str(index_dir), "--concurrency", "0"], "--concurrency"),
        (["batch", str(plans), "--out", str(out), "--index", str(tmp_path / "no-index")], "no-index"),
        (["batch", str(plans), "--out", str(tmp_path / "absent" / "r.jsonl"), "--index", str(index_dir)], "absent"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("race: error: ") and where in err and len(err.splitlines()) == 1
        assert not out.exists()


def test_plan_lines_skip_blank_lines_and_read_ids() -> None:
    items = plan_lines([b'{"id": 7, "plan": {"a": 1}}', b"  ", b'{"schema_version": "race.plan/1"}'])
    assert [(i.line, i.id) for i in items] == [(1, "7"), (3, None)]
    assert json.loads(items[0].text) == {"a": 1}
    assert items[0].source != items[1].source


def test_cli_and_local_batch_never_import_ray(index_dir: Path, tmp_path: Path) -> None:
    plans = tmp_path / "plans.jsonl"
    plans.write_bytes(orjson.dumps(json.loads(PLANS[0].read_text())) + b"\n")
    script = (
        "import sys, contextlib, io\n"
        "import race.cli.main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    race.cli.main.main(['--help'])\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    race.cli.main.main(['batch', '--help'])\n"
        f"assert race.cli.main.main(['batch', {str(plans)!r}, '--out', {str(tmp_path / 'out.jsonl')!r},"
        f" '--index', {str(index_dir)!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_killed_batch_resumed_writes_its_records_in_plans_file_order(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`race batch` SIGKILLed after some records, its bad line 2 then fixed: the resumed batch
    runs line 2 and the lines the kill left unanswered, and the file ends with one record per
    line, in plans-file order, the receipts it kept untouched."""
    import os
    import signal
    import time

    plans, out = tmp_path / "plans.jsonl", tmp_path / "receipts.jsonl"
    lines = [orjson.dumps(roomy_plan(p)) for p in PLANS[:12]]
    lines[1] = b"not json"
    plans.write_bytes(b"\n".join(lines) + b"\n")
    args = ["batch", str(plans), "--out", str(out), "--index", str(index_dir), "--concurrency", "1"]
    script = "import sys; from race.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not out.exists() or out.read_bytes().count(b"\n") < 4:
        assert proc.poll() is None, "race batch ended before it could be killed"
        assert time.monotonic() < deadline, "race batch wrote no records"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = out.read_bytes().splitlines(keepends=True)
    complete = [r for r in before if r.endswith(b"\n")]
    assert 4 <= len(complete) < 12
    assert [json.loads(r)["line"] for r in complete] == list(range(1, len(complete) + 1))
    assert "error" in json.loads(complete[1])
    lines[1] = orjson.dumps(roomy_plan(PLANS[12]))
    plans.write_bytes(b"\n".join(lines) + b"\n")
    # Exit 3: two fixture plans leave a mandatory obligation unsatisfied (lines 8 and 11).
    assert main(args) == 3
    assert f"{len(complete) - 1} already in" in capsys.readouterr().err
    after = out.read_bytes().splitlines(keepends=True)
    assert [json.loads(r)["line"] for r in after] == list(range(1, 13))
    assert after[0] == complete[0] and after[2 : len(complete)] == complete[2:]
    assert all("receipt" in json.loads(r) for r in after)
    assert not (tmp_path / ".receipts.jsonl.resume").exists()
