"""Calibrated approximation (docs/invariants.md#calibrated-approximation): recall measured on
the index a contract describes, declared as a lower confidence bound per selectivity bucket,
carried by every approximate hit, and used by the planner for an obligation's ``min_recall``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lancedb
import pytest

from backends.calibration import read_calibration, wilson_lower
from backends.lancedb import LanceAdapter
from backends.lancedb.calibration import calibrate, write_calibration
from backends.lancedb.query import TABLE
from planner.explain import render_text
from race.engine import Engine
from rsc import UNCALIBRATED, Calibration, RecallBucket, bucket_of
from tests.conftest import FIXTURES, load_plan


def test_wilson_bound_is_below_the_mean_and_tightens_with_queries() -> None:
    assert wilson_lower(1.0, 32) == pytest.approx(32 / (32 + 1.6448536269514722**2))
    assert wilson_lower(0.8, 16) < wilson_lower(0.8, 160) < 0.8
    assert wilson_lower(0.0, 10) == 0.0


@pytest.mark.parametrize(
    ("selectivity", "bucket"),
    [(0.0005, "<0.1%"), (0.001, "0.1-1%"), (0.05, "1-10%"), (0.1, "10-50%"), (0.7, ">50%"), (1.0, ">50%")],
)
def test_buckets(selectivity: float, bucket: str) -> None:
    assert bucket_of(selectivity) == bucket


def test_an_index_is_calibrated_when_it_is_built(index_dir: Path) -> None:
    found = read_calibration(index_dir / "lancedb")
    assert found is not None
    generation, calibrations = found
    assert generation == LanceAdapter.open(index_dir).generation()
    by_id = {c.rsc_id: c for c in calibrations}
    assert set(by_id) == {"lancedb.ann_postfilter", "lancedb.ann_prefilter"}
    pre = by_id["lancedb.ann_prefilter"]
    # At fixture scale 20 probes cover all ~15 partitions: ANN answers equal the exact ones.
    assert pre.unfiltered is not None and pre.unfiltered.mean_recall == 1.0
    for bucket in (pre.unfiltered, *pre.buckets):
        # At most the bound of the pooled mean: each filter value's own bound can be lower.
        assert bucket.lower_bound <= wilson_lower(bucket.mean_recall, bucket.queries) + 1e-6
        assert bucket.lower_bound < bucket.mean_recall or bucket.mean_recall == 0.0
    # A postfilter keeps only what survives the filter out of its top k: its filtered recall is low.
    post = by_id["lancedb.ann_postfilter"]
    assert min(b.mean_recall for b in post.buckets) < 0.5


def test_declared_bounds_hold_on_fresh_queries(index_dir: Path) -> None:
    """Measured again with other seeds, the mean recall of a bucket is at least the bound the
    calibration declared for it, in at least 95 % of buckets."""
    adapter = LanceAdapter.open(index_dir)
    declared = {c.rsc_id: c for c in calibrate(adapter, seed=7)}
    held = total = 0
    for seed in (8, 9):
        for fresh in calibrate(adapter, seed=seed):
            before = declared[fresh.rsc_id]
            for old, new in _pairs(before, fresh):
                total += 1
                held += new.mean_recall >= old.lower_bound
    assert total >= 20 and held / total >= 0.95, (held, total)


def _pairs(a: Calibration, b: Calibration) -> list[tuple[RecallBucket, RecallBucket]]:
    out = []
    if a.unfiltered is not None and b.unfiltered is not None:
        out.append((a.unfiltered, b.unfiltered))
    index = {x.bucket: x for x in b.buckets}
    out += [(x, index[x.bucket]) for x in a.buckets if x.bucket in index]
    for field, buckets in a.fields.items():
        other = {x.bucket: x for x in b.fields.get(field, ())}
        out += [(x, other[x.bucket]) for x in buckets if x.bucket in other]
    return out


def test_an_approximate_hit_names_the_recall_its_contract_promised(index_dir: Path) -> None:
    receipt = Engine.open(index_dir).run_sync(load_plan("postfilter_heuristic.json"))
    approximate = [h for i in receipt.evidence for h in i.hits if h.custody.rsc.startswith("lancedb.ann")]
    assert approximate
    for hit in approximate:
        promise = hit.custody.expected_recall
        assert promise is not None and promise.calibration.startswith("xxh3_128:") and promise.k == 10
    exact = [h for i in receipt.evidence for h in i.hits if not h.custody.rsc.startswith("lancedb.ann")]
    assert all(h.custody.expected_recall is None for h in exact)


def test_min_recall_selects_only_legs_whose_bound_reaches_it(index_dir: Path) -> None:
    engine = Engine.open(index_dir)
    plan = load_plan("postfilter_heuristic.json")
    assert engine.plan_sync(plan).physical.model_dump_json().count("ann_postfilter") >= 1
    for ob in plan["obligations"]:
        ob["min_recall"] = 0.99
    explain = engine.plan_sync(plan)
    # The plan allows only the ANN postfilter contract: below min_recall, nothing can serve it.
    assert explain.physical.kind == "unsatisfiable"
    reasons = [r for g in explain.groups for a in g.alternatives for r in a.rejected_because]
    assert any("min_recall 0.99" in r and "below it" in r for r in reasons)
    receipt = engine.run_sync(plan)
    assert receipt.obligations[0].status.value == "unsatisfied"


def test_a_calibration_covers_only_the_generation_it_measured(index_dir: Path) -> None:
    engine = Engine.open(index_dir)
    now = engine.generations()
    assert any(c.calibration is not None for c in engine.contracts_at(now))
    moved = {**now, "lancedb": "another-generation"}
    assert all(c.calibration is None for c in engine.contracts_at(moved))


def test_a_table_changed_outside_race_promises_no_recall(index_dir: Path, tmp_path: Path) -> None:
    """After a write RACE did not make, the calibration is of another generation: an approximate
    leg then promises nothing (the contract's shipped figure was measured elsewhere), explain
    and every approximate hit say so, and ``min_recall`` refuses the leg."""
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    table = lancedb.connect(str(copy / "lancedb")).open_table(TABLE)
    table.delete(f"chunk_id = '{table.to_arrow().column('chunk_id')[0].as_py()}'")
    engine = Engine.open(copy)
    plan = load_plan("postfilter_heuristic.json")
    text = render_text(engine.plan_sync(plan))
    assert "expected recall: not calibrated on this index generation: nothing promised" in text
    receipt = engine.run_sync(plan)
    approximate = [h for i in receipt.evidence for h in i.hits if h.custody.rsc.startswith("lancedb.ann")]
    assert approximate
    for hit in approximate:
        promise = hit.custody.expected_recall
        assert promise is not None and promise.recall is None and promise.calibration == UNCALIBRATED
    for ob in plan["obligations"]:
        ob["min_recall"] = 0.5
    reasons = [r for g in engine.plan_sync(plan).groups for a in g.alternatives for r in a.rejected_because]
    assert any("no recall was calibrated for lancedb.ann_postfilter" in r for r in reasons)


def test_calibration_document_round_trips(index_dir: Path) -> None:
    document = json.loads((index_dir / "lancedb" / "calibration.json").read_text())
    assert document["schema_version"] == "race.calibration/1"
    for raw in document["calibrations"]:
        assert Calibration.model_validate(raw).model_dump(mode="json") == raw


def test_fixture_plans_still_plan(index_dir: Path) -> None:
    engine = Engine.open(index_dir)
    for path in sorted((FIXTURES / "plans").glob("*.json")):
        engine.plan_sync(path)


def test_range_selectivity_comes_from_the_counted_values() -> None:
    from planner.cost import known_selectivity, selectivity
    from rsc import BackendStatistics, Filter, FilterOp

    stats = BackendStatistics(
        backend="lancedb",
        rows=10,
        value_counts={"date": {"2024-01-01": 3, "2024-06-01": 5, "2025-01-01": 2}, "severity": {"1": 4, "3": 6}},
    )
    since = Filter(field="date", op=FilterOp.RANGE, gte="2024-05-01")
    assert selectivity(stats, [since])[0] == pytest.approx(0.7)
    severe = Filter(field="severity", op=FilterOp.RANGE, gte=2)
    assert known_selectivity(stats, [severe]) == pytest.approx(0.6)
    assert known_selectivity(stats, [Filter(field="team", value="x")]) is None


def test_a_bound_below_one_step_of_the_measured_mean_promises_nothing() -> None:
    """A mean recall@10 over 16 queries moves in steps of 1/160: one hit in 160 gives a Wilson
    bound of 0.0004, which 16 fresh queries that find nothing (0.0) fall below; it is 0. A
    bound of one step or more is the Wilson bound itself."""
    from backends.calibration import _bucket

    one_hit = [[0.1] + [0.0] * 7, [0.0] * 8]
    assert 0.0 < wilson_lower(1 / 160, 16) < 1 / 160
    tiny = _bucket("1-10%", one_hit, 10)
    assert tiny is not None and tiny.mean_recall == round(1 / 160, 6) and tiny.lower_bound == 0.0
    half = [[0.5] * 8, [0.5] * 8]
    kept = _bucket("1-10%", half, 10)
    assert kept is not None and kept.lower_bound == round(min(wilson_lower(0.5, 16), wilson_lower(0.5, 8)), 6) > 0


def test_a_long_lived_engine_reads_the_calibration_of_an_index_rebuilt_in_place(
    index_dir: Path, tmp_path: Path
) -> None:
    """A table written to and calibrated again after the engine opened: the engine that stayed
    open promises what a fresh engine over the same index promises, byte for byte."""
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    long_lived = Engine.open(copy)
    before = long_lived.generations()
    table = lancedb.connect(str(copy / "lancedb")).open_table(TABLE)
    table.delete(f"chunk_id = '{table.to_arrow().column('chunk_id')[0].as_py()}'")
    fresh = LanceAdapter.open(copy)
    write_calibration(fresh, copy / "lancedb")
    after = Engine.open(copy)
    now = after.generations()
    assert now["lancedb"] != before["lancedb"]
    assert any(c.calibration is not None for c in after.contracts_at(now))
    assert long_lived.contracts_at(now) == after.contracts_at(now)
    plan = load_plan("postfilter_heuristic.json")
    assert long_lived.plan_sync(plan).model_dump_json() == after.plan_sync(plan).model_dump_json()
