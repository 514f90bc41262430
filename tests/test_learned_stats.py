"""Learned statistics: runs append what their scans measured; plans are costed with it.

Advisory only (I2): a hostile statistics file (absurd latencies) changes which contract serves
an obligation, never the evidence, a status or a coverage, and never buys a contract below the
coverage an obligation requires. Its digest is in the statistics and physical fingerprints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner import render_text, scans
from race.cli.main import main
from race.engine import Engine, load_statistics
from race.state.learned import LearnedStatistics, load_learned, parse_learned
from tests.conftest import FIXTURES

SHOWCASE = FIXTURES / "plans" / "showcase.json"

# Every obligation asks for exhaustive coverage: any contract that may serve it answers the same.
EXACT_PLAN: dict[str, Any] = {
    "schema_version": "race.plan/1",
    "root": "u",
    "obligations": [
        {
            "id": "mem",
            "kind": "seek_support",
            "query": {"text": "the broker ran out of memory and was killed"},
            "query_class": "conceptual",
            "k": 5,
            "required_coverage": "exhaustive_for_declared_fragment",
        },
        {
            "id": "tls",
            "kind": "seek_refutation",
            "query": {"text": "is TLS enough against the SCRAM bypass"},
            "query_class": "broad_question",
            "k": 5,
            "required_coverage": "exhaustive_for_declared_fragment",
        },
    ],
    "operators": [{"id": "u", "op": "union", "inputs": ["mem", "tls"]}],
}


def _observation(rsc: str, ms: float, **changes: Any) -> dict[str, Any]:
    line = {
        "schema_version": "race.observation/1",
        "plan": "xxh3_128:0",
        "node": "o",
        "rsc": rsc,
        "backend": rsc.split(".")[0],
        "k": 5,
        "rows": 100,
        "selectivity": 1,
        "candidates": 100,
        "candidate_ms": 0,
        "hits": 5,
        "ms": ms,
        "model_calls": 0,
    }
    line.update(changes)
    return line


def _learned(*lines: dict[str, Any]) -> LearnedStatistics:
    return parse_learned("".join(json.dumps(line) + "\n" for line in lines).encode(), where="hostile.jsonl")


# The exact vector contract the planner prefers is absurdly slow; an ANN one, too weak for these
# obligations, absurdly fast.
HOSTILE = (
    _observation("lancedb.exact_matrix@1.0.0", 1e9),
    _observation("lancedb.ann_prefilter@1.1.0", 0.0),
    _observation("lancedb.ann_postfilter@1.1.0", 0.0),
)


def test_hostile_statistics_change_choices_never_evidence(index_dir: Path) -> None:
    plain = Engine.open(index_dir)
    hostile = Engine.open(index_dir, statistics=_learned(*HOSTILE))
    before, after = plain.plan_sync(EXACT_PLAN), hostile.plan_sync(EXACT_PLAN)
    chose_before = {s.rsc for s in scans(before.physical)}
    chose_after = {s.rsc for s in scans(after.physical)}
    assert "lancedb.exact_matrix@1.0.0" in chose_before
    assert "lancedb.exact_matrix@1.0.0" not in chose_after  # the statistics changed the choice...
    assert not any("ann" in rsc for rsc in chose_after)  # ...never below the required coverage
    assert after.fingerprints.physical != before.fingerprints.physical
    assert after.fingerprints.statistics != before.fingerprints.statistics
    first, second = plain.run_sync(EXACT_PLAN), hostile.run_sync(EXACT_PLAN)
    assert [(e.key, e.rank, e.status) for e in first.evidence] == [(e.key, e.rank, e.status) for e in second.evidence]
    assert [(o.id, o.status, o.search_coverage, o.support_closure) for o in first.obligations] == [
        (o.id, o.status, o.search_coverage, o.support_closure) for o in second.obligations
    ]
    assert first.coverage == second.coverage and first.gaps == second.gaps
    # The receipts tell the plans apart (the contracts differ), and so do their custody records.
    assert first.fingerprints.physical != second.fingerprints.physical


def test_the_digest_is_in_the_physical_fingerprint(index_dir: Path) -> None:
    # Two files that choose the same plan still give two physical fingerprints.
    one = Engine.open(index_dir, statistics=_learned(_observation("graph.traverse@1.0.0", 1.0)))
    two = Engine.open(index_dir, statistics=_learned(_observation("graph.traverse@1.0.0", 2.0)))
    a, b = one.plan_sync(SHOWCASE), two.plan_sync(SHOWCASE)
    assert [s.rsc for s in scans(a.physical)] == [s.rsc for s in scans(b.physical)]
    assert a.fingerprints.physical != b.fingerprints.physical
    assert render_text(a) == render_text(one.plan_sync(SHOWCASE))  # deterministic bytes
    assert "base latency 1 ms (measured)" in render_text(a)


def test_record_then_plan_with_what_was_measured(index_dir: Path, tmp_path: Path) -> None:
    stats = tmp_path / "stats.jsonl"
    engine = Engine.open(index_dir, record_stats=stats)
    receipt = engine.run_sync(SHOWCASE)
    analysis = receipt.operational.analysis
    assert analysis is not None
    ran = [n for n in analysis.nodes if n.kind == "scan" and n.cache == "miss" and n.outcome == "ok"]
    learned = load_learned(stats)
    assert len(learned.observations) == len(ran) > 0
    for obs, node in zip(learned.observations, ran, strict=True):
        assert (obs.rsc, obs.ms, obs.hits) == (node.name, node.actual_ms, node.actual_rows)
    # A second run appends; the file is the history of runs.
    Engine.open(index_dir, record_stats=stats).run_sync(SHOWCASE)
    assert len(load_learned(stats).observations) == 2 * len(ran)
    loaded = load_statistics(stats)
    assert isinstance(loaded, LearnedStatistics)
    explain = Engine.open(index_dir, statistics=loaded).plan_sync(SHOWCASE)
    medians = {s.rsc: s.base_ms for s in loaded.summary()}
    text = render_text(explain)
    for rsc, base in medians.items():
        assert f"base latency {base:g} ms (measured)" in text, rsc


def test_cli_record_show_and_plan(index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stats = tmp_path / "stats.jsonl"
    assert main(["run", str(SHOWCASE), "--index", str(index_dir), "--record-stats", str(stats)]) == 0
    capsys.readouterr()
    assert main(["stats", "show", str(stats)]) == 0
    out = capsys.readouterr().out
    assert "observations" in out and "graph.traverse@1.0.0" in out
    assert main(["stats", "show", str(stats), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["observations"] == len(stats.read_text().splitlines())
    assert main(["plan", str(SHOWCASE), "--index", str(index_dir), "--stats", str(stats)]) == 0
    assert "(measured)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "stats.jsonl:2: not a JSON object"),
        (json.dumps(_observation("tantivy.bm25@1.0.0", -1.0)), "stats.jsonl:2: "),
        (json.dumps(_observation("tantivy.bm25@1.0.0", 1.0, extra=1)), "stats.jsonl:2: "),
        ('{"schema_version": "race.observation/1", "ms": NaN}', "stats.jsonl:2: not a JSON object: NaN is not JSON"),
        ("[1, 2]", "stats.jsonl:2: not a JSON object but list"),
    ],
)
def test_a_bad_statistics_file_names_file_and_line(
    line: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stats = tmp_path / "stats.jsonl"
    stats.write_text(json.dumps(_observation("graph.traverse@1.0.0", 1.0)) + "\n" + line + "\n")
    for argv in (["plan", str(SHOWCASE), "--stats", str(stats)], ["stats", "show", str(stats)]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert message in captured.err and captured.err.count("\n") == 1


def test_record_stats_into_a_missing_folder_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no-such-folder" / "stats.jsonl"
    assert main(["run", str(SHOWCASE), "--record-stats", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--record-stats" in captured.err
    assert not target.parent.exists()


def test_a_scan_faster_than_its_candidates_were_priced_scales_their_price() -> None:
    """The 1M-row case: an exact scan priced 400 ms by its candidates took 160 ms. Its base
    latency cannot go below zero, so the price per candidate takes the difference, and the
    estimate made again from the same inputs is what the scans took (median)."""
    from planner import Statistics, estimate_scan
    from race.engine import known_contracts
    from rsc import BackendStatistics

    [matrix] = [c for c in known_contracts() if c.rsc_id == "lancedb.exact_matrix"]
    rows = 1_000_000
    prior = rows * matrix.cost.per_candidate_us / 1000.0
    lines = [
        _observation(matrix.ref, ms, rows=rows, candidates=rows, candidate_ms=prior, k=10)
        for ms in (0.4 * prior, 0.5 * prior, 0.6 * prior)
    ]
    learned = _learned(*lines)
    [summary] = learned.summary()
    assert summary.base_ms == 0.0 and summary.price_scale == pytest.approx(0.5, abs=1e-4)
    base = Statistics(backends={"lancedb": BackendStatistics(backend="lancedb", rows=rows)})
    stats = learned.apply(base)
    assert stats.backends["lancedb"].price_scale == {"lancedb.exact_matrix": pytest.approx(0.5, abs=1e-4)}
    before = estimate_scan(matrix, k=10, pushed=(), stats=base)
    after = estimate_scan(matrix, k=10, pushed=(), stats=stats)
    assert after.candidates == before.candidates == rows
    expected = 0.5 * prior + matrix.model_calls * stats.model_call_ms
    assert after.cost_ms == pytest.approx(expected, rel=1e-3)
    assert "price per candidate x 0.5 (learned)" in after.latency
    # A scan slower than its candidates' price keeps the price and learns the base instead.
    slow = _learned(_observation(matrix.ref, prior + 7.0, rows=rows, candidates=rows, candidate_ms=prior))
    [item] = slow.summary()
    assert item.price_scale == 1.0 and item.base_ms == pytest.approx(7.0, abs=1e-3)
    assert slow.apply(base).backends["lancedb"].price_scale == {}
