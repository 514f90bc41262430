"""EXPLAIN ANALYZE: ``Engine.run(..., analyze=True)`` and ``race run --analyze``.

The analysis is the chosen plan's estimates beside the run's actuals; it lives in
``operational`` and changes no byte of the normalized receipt. Fixture: the README's showcase.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner import ScanNode, scans
from race.analysis import analyze, q_error
from race.cli.main import main
from race.engine import Engine
from tests.conftest import FIXTURES, roomy_plan

SHOWCASE = FIXTURES / "plans" / "showcase.json"
POSTFILTER = FIXTURES / "plans" / "postfilter_heuristic.json"


def test_q_error_is_the_larger_ratio() -> None:
    assert q_error(4.0, 400.0) == 100.0
    assert q_error(10.0, 5.0) == 2.0
    assert q_error(3.0, 3.0) == 1.0
    # A time of zero (a cache hit) is floored, never a division by zero.
    assert q_error(0.0, 0.0) == 1.0


@pytest.mark.anyio
async def test_analyze_shows_every_scan_with_estimate_and_actual(session_engine: Engine) -> None:
    # Roomy deadlines: on a busy machine a leg's timeout would enter one receipt and not the other.
    showcase = roomy_plan(SHOWCASE)
    # Every leg runs (no result cache): an earlier test's run of the same plan would answer them all.
    analyzed = await session_engine.run(showcase, analyze=True, cache=False)
    plain = await session_engine.run(showcase)
    # Actuals live in operational: the normalized receipt is the same bytes.
    assert analyzed.normalized_bytes() == plain.normalized_bytes()
    assert plain.operational.analysis is None
    analysis = analyzed.operational.analysis
    assert analysis is not None
    # The receipt cache is passed by: the plan ran.
    assert analyzed.operational.receipt_cache == "none"
    explain = await session_engine.plan(showcase)
    assert analysis.physical == explain.fingerprints.physical == analyzed.fingerprints.physical
    planned = [(s.node, s.rsc) for s in scans(explain.physical)]
    found = [(n.node, n.name) for n in analysis.nodes if n.kind == "scan"]
    assert sorted(found) == sorted(planned)
    for node in analysis.nodes:
        if node.kind != "scan":
            continue
        leg = analyzed.operational.legs[node.leg]
        assert node.actual_ms == leg["ms"] and node.actual_rows == leg["hits"]
        assert node.estimated_ms is not None and node.estimated_rows is not None
        assert node.q_error_ms is not None and node.q_error_ms >= 1.0
        assert node.model_calls_made == leg["model_calls"]
        assert node.recall  # exact, or the calibrated promise
    # The query-embedding legs made their model call, the symbolic ones none (I10).
    by_name = {n.name: n for n in analysis.nodes if n.kind == "scan"}
    assert by_name["graph.traverse@1.0.0"].model_calls_made == 0
    assert set(analysis.phases) == {"setup", "plan", "pins", "legs", "fusion", "receipt"}
    assert analysis.q_error.scans >= 1 and analysis.q_error.latency_max is not None
    # The tree is the physical plan's, root first.
    assert analysis.nodes[0].node == explain.physical.node and analysis.nodes[0].depth == 0


def test_analysis_is_a_pure_function_of_plan_and_legs(session_engine: Engine) -> None:
    explain = session_engine.plan_sync(SHOWCASE)
    scan = next(s for s in scans(explain.physical) if isinstance(s, ScanNode))
    legs = {f"{scan.node}/{scan.rsc}": {"ms": scan.cost * 10, "hits": 0, "cache": "miss", "outcome": "ok"}}
    contracts = {c.ref: c for c in session_engine.contracts()}
    stats = session_engine.statistics()
    one = analyze(explain, legs=legs, contracts=contracts, statistics=stats, phases={"legs": 1.0}, wall_ms=2.0)
    two = analyze(explain, legs=legs, contracts=contracts, statistics=stats, phases={"legs": 1.0}, wall_ms=2.0)
    assert one == two
    node = next(n for n in one.nodes if n.leg == f"{scan.node}/{scan.rsc}")
    assert node.q_error_ms == pytest.approx(10.0, rel=1e-3)
    # Legs the run never reached say so rather than read as zero.
    assert any(n.outcome == "not run" and n.actual_ms is None for n in one.nodes if n.kind == "scan")
    assert one.q_error.scans == 1


def test_cli_analyze_text_and_json(index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SHOWCASE), "--index", str(index_dir), "--analyze"]) == 0
    out = capsys.readouterr().out
    assert "q-error     latency max" in out
    explain = Engine.open(index_dir).plan_sync(SHOWCASE)
    [walk] = [s for s in scans(explain.physical) if s.node == "python-deps"]
    assert f"scan python-deps [G5] graph.traverse@1.0.0  time {round(walk.cost, 3):g} ms ->" in out
    assert "recall promised: exact" in out
    assert main(["run", str(SHOWCASE), "--index", str(index_dir), "--analyze", "--json"]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["operational"]["analysis"]["schema_version"] == "race.analyze/1"


def test_cli_analyze_names_gaps(index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(POSTFILTER), "--index", str(index_dir), "--analyze"]) == 0
    out = capsys.readouterr().out
    assert "postfilter_only_filter" in out.split("gaps (", 1)[1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", str(SHOWCASE), "--format", "html"], "--format: --format html draws an analysis: add --analyze"),
        (["run", str(SHOWCASE), "--format", "svg"], "--format: unknown format 'svg'"),
        (["plan", str(SHOWCASE), "--format", "html"], "--format: unknown format 'html'"),
        (["plan", str(SHOWCASE), "--json", "--format", "dot"], "--format: --json and --format dot disagree"),
    ],
)
def test_bad_formats_are_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err and captured.err.count("\n") == 1
