"""The typed plan builder (race.builder): the same plan, JSON and fingerprint as a plan file,
and mypy --strict catches a misspelt kind, query class or filter operator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

import race
from planner import logical_fingerprint, parse_plan
from race import Field, Plan, builder
from rsc import FilterOp, InputError, ObligationKind, PlanError, QueryClass, SearchCoverage, Strategy

ROOT = Path(__file__).resolve().parent.parent
PLAN_FILES = sorted((ROOT / "fixtures" / "plans").rglob("*.json"))


def _node(data: dict[str, Any]) -> builder.Node:
    """The builder call a user would write for one node of a plan file, argument by argument."""
    fields = dict(data)
    node_id = fields.pop("id")
    if "op" not in fields:
        kind = fields.pop("kind")
        query = fields.pop("query")
        return race.obligation(node_id, kind, **query, **fields)
    op = fields.pop("op")
    make = getattr(race, op)
    if "inputs" in fields:
        return make(node_id, *fields.pop("inputs"), **fields)  # type: ignore[no-any-return]
    if op == "join":
        return race.join(node_id, fields.pop("left"), fields.pop("right"), **fields)
    if op == "oppose":
        return race.oppose(node_id, fields["support"], fields["refutation"])
    return make(node_id, fields.pop("input"), **fields)  # type: ignore[no-any-return]


def _plan(data: dict[str, Any]) -> Plan:
    nodes = [_node(n) for n in [*data["obligations"], *data.get("operators", [])]]
    extra = {key: data[key] for key in ("budget", "generations", "contracts") if key in data}
    return Plan(data["root"], *nodes, **extra)


@pytest.mark.parametrize("path", PLAN_FILES, ids=lambda p: p.stem)
def test_every_fixture_plan_round_trips(path: Path) -> None:
    data = json.loads(path.read_text())
    plan = _plan(data)
    # The builder leaves out an empty operator list, as a plan file may.
    assert plan.to_dict() == {k: v for k, v in data.items() if not (k == "operators" and v == [])}
    built = plan.build()
    assert built == parse_plan(path.read_bytes())
    assert plan.fingerprint() == logical_fingerprint(parse_plan(path.read_bytes()))
    assert parse_plan(plan.to_json()) == built


def test_fixtures_are_found() -> None:
    assert len(PLAN_FILES) >= 29


def test_showcase_written_by_hand() -> None:
    from race import corroborate, obligation, oppose, union

    fixed = obligation(
        "fixed-release",
        "seek_fresher_state",
        text="CVE-2024-31337 fixed release upgrade 3.4.2",
        query_class="lexical",
        hard_filters=Field("authority").isin(["official", "maintainer"]),
        freshness={"as_of": "2026-11-30"},
        k=5,
    )
    tls = obligation(
        "tls-defeater",
        "seek_refutation",
        text="is turning on TLS enough to protect brokers from the SCRAM authentication bypass",
        query_class="broad_question",
        k=5,
    )
    memory = obligation(
        "memory-reports",
        "seek_support",
        text="the broker ran out of memory and was killed",
        query_class="conceptual",
        hard_filters=[{"field": "doc_type", "value": "incident"}],
        k=4,
    )
    plan = Plan(
        union(
            "answer",
            obligation(
                "cve-id",
                "seek_support",
                text="CVE-2024-31337",
                query_class="identifier",
                k=40,
                required_coverage="exhaustive_for_declared_fragment",
            ),
            oppose("fix-vs-tls", fixed, tls),
            corroborate("memory", memory, min_independent=2),
            obligation(
                "python-deps",
                "seek_support",
                entities=["entity:kestrel-python-client"],
                pattern={"relations": ["depends_on"], "direction": "out", "depth": 3},
                query_class="dependency",
                k=10,
                required_coverage="bounded_structural",
            ),
        ),
        budget={"deadline_ms": 10000, "leg_timeout_ms": 5000},
        generations={
            "identity": "kestrel-evidence-expert/1",
            "source_dependence": "1",
            "freshness": "2026-11-30",
            "authority": "1",
        },
    )
    on_disk = parse_plan((ROOT / "fixtures" / "plans" / "showcase.json").read_bytes())
    assert plan.build() == on_disk
    assert plan.fingerprint() == logical_fingerprint(on_disk)


def test_literals_are_the_enums() -> None:
    assert set(typing.get_args(builder.KindName)) == {k.value for k in ObligationKind}
    assert set(typing.get_args(builder.QueryClassName)) == {c.value for c in QueryClass}
    assert set(typing.get_args(builder.StrategyName)) == {s.value for s in Strategy}
    assert set(typing.get_args(builder.CoverageName)) == {c.value for c in SearchCoverage}
    assert set(typing.get_args(builder.FilterOpName)) == {o.value for o in FilterOp}


def test_bad_plans_name_the_place() -> None:
    a = race.obligation("a", "seek_support", text="x", query_class="lexical")
    with pytest.raises(InputError, match="two different nodes have id 'a'"):
        Plan(race.union("u", a, race.obligation("a", "seek_support", text="y", query_class="lexical"))).to_dict()
    with pytest.raises(PlanError, match="'nowhere'"):
        Plan(race.union("u", a, "nowhere")).build()
    with pytest.raises(PlanError, match="node 'b'"):
        Plan(race.union("u", a, race.obligation("b", "seek_nothing", text="y", query_class="lexical"))).build()  # type: ignore[arg-type]
    with pytest.raises(InputError, match="union needs at least one input"):
        race.union("u")


def test_shared_node_is_written_once() -> None:
    a = race.obligation("a", "seek_support", text="x", query_class="lexical")
    b = race.obligation("b", "seek_support", text="x", query_class="conceptual")
    plan = Plan(race.union("u", race.intersect("i", a, b), a), b)
    data = plan.to_dict()
    assert [o["id"] for o in data["obligations"]] == ["a", "b"]
    assert [o["id"] for o in data["operators"]] == ["u", "i"]
    assert plan.build().root == "u"


MISTAKES = """
from race import Field, Plan, obligation, refine

q = obligation("q", "seek_suport", text="broker", query_class="lexical")
r = obligation("r", "seek_support", text="broker", query_class="lexcal")
f = refine("f", q, filters=[{"field": "status", "op": "equals", "value": "fixed"}])
ok = Plan(refine("g", r, filters=Field("status") == "fixed"), budget={"deadline_ms": 500})
"""


def test_mypy_strict_catches_a_wrong_kind(tmp_path: Path) -> None:
    snippet = tmp_path / "user_plan.py"
    snippet.write_text(MISTAKES)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
            "--cache-dir", str(tmp_path / "cache"), "--config-file", os.devnull, str(snippet),
        ],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(errors) == 3, done.stdout
    assert (
        'user_plan.py:4: error: Argument 2 to "obligation" has incompatible type "Literal[\'seek_suport\']"'
        in errors[0]
    )
    assert "user_plan.py:5:" in errors[1] and "query_class" in errors[1]
    assert "user_plan.py:6:" in errors[2] and '"op"' in errors[2]


def test_the_guide_example_runs_as_written() -> None:
    guide = (ROOT / "docs" / "guide" / "python.md").read_text()
    section = guide[guide.index("## Plans written in Python") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("```\n", start)]
    scope: dict[str, Any] = {}
    exec(compile(code, "python.md", "exec"), scope)
    plan = scope["plan"].build()
    assert plan.root == "recent" and [o.id for o in plan.obligations] == ["lex", "vec"]
    receipt = scope["receipt"]
    assert [o.id for o in receipt.obligations] == ["lex", "vec"]
    assert sorted(o.id for o in receipt.operators) == ["both", "recent"]
    with race.Engine.bundled() as engine:
        assert engine.run_sync(scope["plan"].to_dict()).normalized_bytes() == receipt.normalized_bytes()
