"""Explain is deterministic bytes; golden files under fixtures/golden/ pin them.

Regenerate after an intended change with ``RACE_UPDATE_GOLDEN=1 pytest tests/test_explain.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from planner import compile_plan, parse_plan, render_json, render_text
from race.cli.main import main
from race.engine import Engine, known_contracts
from tests.conftest import FIXTURES

GOLDEN = FIXTURES / "golden"
PLANS = sorted(p for p in (FIXTURES / "plans").glob("*.json"))
FIXED_GENERATIONS = {
    "tantivy": "tantivy:golden",
    "lancedb": "lancedb:golden",
    "graph": "graph:golden",
    "remote": "remote:golden",
}


def _explain(plan_path: Path, engine: Engine) -> tuple[str, str]:
    plan = parse_plan(plan_path.read_bytes(), where=plan_path.name)
    explain = compile_plan(
        plan, contracts=known_contracts(), backend_generations=FIXED_GENERATIONS, stats=engine.statistics()
    )
    return render_text(explain), render_json(explain)


@pytest.mark.parametrize("plan_path", PLANS, ids=[p.stem for p in PLANS])
def test_explain_matches_golden(plan_path: Path, session_engine: Engine) -> None:
    text, data = _explain(plan_path, session_engine)
    for suffix, content in ((".explain.txt", text), (".explain.json", data)):
        golden = GOLDEN / (plan_path.stem + suffix)
        if os.environ.get("RACE_UPDATE_GOLDEN"):
            golden.write_text(content)
        assert golden.exists(), f"no golden file {golden.name}; run with RACE_UPDATE_GOLDEN=1"
        assert content == golden.read_text(), f"{golden.name} differs"


def test_planning_twice_gives_identical_bytes(session_engine: Engine) -> None:
    for plan_path in PLANS:
        assert _explain(plan_path, session_engine) == _explain(plan_path, session_engine)


def test_explain_cli_bytes_survive_key_reordering(
    tmp_path: Path, index_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = FIXTURES / "plans" / "showcase.json"

    def reorder(value: object) -> object:
        if isinstance(value, dict):
            return {k: reorder(value[k]) for k in sorted(value, reverse=True)}
        if isinstance(value, list):
            return [reorder(v) for v in value]
        return value

    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps(reorder(json.loads(original.read_text())), indent=4))
    outputs = []
    for path in (original, original, shuffled):
        assert main(["plan", str(path), "--explain", "--json", "--index", str(index_dir)]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert json.loads(outputs[0])["schema_version"] == "race.explain/1"


def test_explain_json_has_the_stable_keys(session_engine: Engine) -> None:
    explain = session_engine.plan_sync(FIXTURES / "plans" / "showcase.json")
    data = json.loads(render_json(explain))
    assert {"schema_version", "fingerprints", "groups", "physical"} <= set(data)
    group = data["groups"][0]
    assert {"id", "logical", "alternatives"} <= set(group)
    assert {"rule", "rsc", "cost", "losses", "chosen", "rejected_because"} <= set(group["alternatives"][0])
    assert [g["id"] for g in data["groups"]] == list(range(1, len(data["groups"]) + 1))
    assert data["groups"][0]["logical"] == "answer"


def test_every_physical_operator_names_its_logical_node(session_engine: Engine) -> None:
    from planner import walk

    plan = parse_plan((FIXTURES / "plans" / "showcase.json").read_bytes())
    explain = session_engine.plan_sync(plan)
    logical = {o.id for o in plan.obligations} | {o.id for o in plan.operators}
    for node in walk(explain.physical):
        assert node.node in logical
