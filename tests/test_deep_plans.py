"""Deep plans within the declared bounds plan and run, in time linear in their size; deeper
ones are refused as bad input naming the bound (MAX_DEPTH_CEILING)."""

from __future__ import annotations

import contextlib
import json
import sys

import pytest

from planner import parse_plan
from planner.validate import MAX_DEPTH_CEILING
from race.engine import Engine
from rsc import BoundExceeded, PlanError
from rsc.canonical import canonical_json, read_json
from tests.conftest import FIXTURES
from tests.test_bad_input import refine_chain


def test_a_200_deep_refine_chain_plans_and_runs(engine: Engine) -> None:
    plan = refine_chain(200)
    explain = engine.plan_sync(plan)
    receipt = engine.run_sync(plan)
    assert receipt.fingerprints.plan == explain.fingerprints.plan
    assert {o.id for o in receipt.operators} == {f"r{i}" for i in range(200)}


def test_the_deepest_legal_chain_runs(engine: Engine) -> None:
    receipt = engine.run_sync(refine_chain(MAX_DEPTH_CEILING - 1))
    assert len(receipt.operators) == MAX_DEPTH_CEILING - 1


def test_checking_a_plan_is_linear_in_its_depth() -> None:
    # Counted in Python calls, not seconds: the count is the same on a busy machine.
    def parse_calls(depth: int) -> int:
        text = json.dumps(refine_chain(depth))
        calls = 0

        def count(frame: object, event: str, arg: object) -> None:
            nonlocal calls
            if event == "call":
                calls += 1

        sys.setprofile(count)
        try:
            with contextlib.suppress(BoundExceeded):
                parse_plan(text)
        finally:
            sys.setprofile(None)
        return calls

    parse_calls(200)  # warm up the validators and caches
    small, large = parse_calls(400), parse_calls(4000)
    # Ten times the nodes; a quadratic check (as networkx's find_cycle was) makes ~100x the calls.
    assert 5 * small < large < 15 * small, (small, large)


def test_read_json_refuses_what_python_would_crash_on() -> None:
    with pytest.raises(PlanError, match="nested deeper than 64"):
        read_json(b"[" * 100_000 + b"]" * 100_000, where="p", error=PlanError)
    with pytest.raises(PlanError, match="5000 digits"):
        read_json(b"1" * 5000, where="p", error=PlanError)
    with pytest.raises(PlanError, match="not UTF-8: byte 0xff at offset 2"):
        read_json(b'["\xff"]', where="p", error=PlanError)
    # Brackets inside strings are text, not nesting.
    assert read_json(json.dumps(["[" * 500]), where="p", error=PlanError) == ["[" * 500]


def test_canonical_json_of_data_deeper_than_orjson_allows() -> None:
    deep: object = 1
    for _ in range(300):
        deep = {"a": deep}
    assert canonical_json(deep) == b'{"a":' * 300 + b"1" + b"}" * 300
    assert canonical_json({"b": [1.5, "x"], "a": None}) == b'{"a":null,"b":[1.5,"x"]}'


def test_a_dict_plan_with_a_deeply_nested_unknown_field_is_a_plan_error() -> None:
    plan = json.loads((FIXTURES / "plans" / "cascade_lexical.json").read_text())
    deep: dict[str, object] = {}
    for _ in range(2000):
        deep = {"x": deep}
    with pytest.raises(PlanError, match="unknown field"):
        Engine.parse({**plan, "x": deep})


def test_two_parses_of_one_plan_are_two_plans() -> None:
    plan = json.loads((FIXTURES / "plans" / "cascade_lexical.json").read_text())
    first, second = Engine.parse(plan), Engine.parse(json.loads(json.dumps(plan)))
    assert first == second and first is not second
    second.contracts["tantivy.bm25"] = "^9.0"
    assert first.contracts == {}, "a plan parsed earlier does not change with another"
