"""Planner properties over random valid logical plans (hypothesis, derandomized).

Plans are DAGs of 1..40 nodes: obligations of all six kinds and every query class, with
random hard filters on the contracts' fields and ops, joined by all nine operators with
valid arities, inputs shared between operators, and a root that reaches every node. Each
is planned against the known contracts (and against every RSC file in the tree) with fixed
generations and empty or fixture statistics, and must satisfy:

(a) every obligation appears in the physical plan, served by a scan, a hybrid or an
    unsatisfiable node, and no hard filter is dropped from its scan;
(b) no chosen alternative and no revision lowers a required coverage;
(c) planning twice, or from the same plan listed in another order, gives the same bytes;
(d) every physical node names a logical node and that node's group (I1);
(e) the memo bounds hold, and pruning is recorded; pruning never changes the choice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import (
    Explain,
    HybridNode,
    LogicalPlan,
    OperatorNode,
    ScanNode,
    Statistics,
    UnsatisfiableNode,
    compile_plan,
    logical_fingerprint,
    normalize,
    parse_plan,
    plan_digest,
    plan_from_dict,
    render_json,
    render_text,
    walk,
)
from planner.matching import known_filter_fields
from race.engine import known_contracts, load_statistics
from rsc import (
    BoundExceeded,
    Contract,
    FilterOp,
    ObligationKind,
    QueryClass,
    SearchCoverage,
    Strategy,
    canonical_json,
    fingerprint,
    load_contract,
)
from tests.conftest import FIXTURES, ROOT

GENERATIONS = {"tantivy": "tantivy:prop", "graph": "graph:prop", "lancedb": "lancedb:prop", "remote": "remote:prop"}
KNOWN = known_contracts()


def _every_contract() -> tuple[Contract, ...]:
    by_ref = {c.ref: c for c in KNOWN}
    for path in sorted(ROOT.glob("backends/*/rsc/*.json")):
        contract = load_contract(path)
        by_ref.setdefault(contract.ref, contract)
    return tuple(by_ref[ref] for ref in sorted(by_ref))


EVERY = _every_contract()
CONTRACT_SETS = {"known": KNOWN, "every": EVERY}
STATISTICS = {
    "empty": Statistics(),
    "selective": load_statistics(FIXTURES / "stats" / "selective.json"),
    "broad": load_statistics(FIXTURES / "stats" / "broad.json"),
}
FIELDS = sorted(known_filter_fields(EVERY))
RSC_IDS = sorted({c.rsc_id for c in EVERY})
VALUES = ("advisory", "runbook", "adr", "official", "maintainer", "security", "storage", "accepted", "3.4.2")
DATES = ("2023-01-01", "2024-06-01", "2026-11-30")
VARIADIC = ("union", "cascade", "fallback", "intersect", "corroborate")
SETTINGS = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=70,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def filters(draw: st.DrawFn) -> dict[str, Any]:
    field = draw(st.sampled_from(FIELDS))
    # Ranges mostly on dates, where contracts support them; elsewhere they make a contract ineligible.
    op = FilterOp.RANGE if field == "date" and draw(st.booleans()) else draw(st.sampled_from([*FilterOp, FilterOp.EQ]))
    if op is FilterOp.EQ:
        return {"field": field, "value": draw(st.sampled_from(VALUES + DATES))}
    if op is FilterOp.IN:
        return {"field": field, "op": "in", "values": draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3))}
    bounds = draw(st.sampled_from((("gte",), ("lte",), ("gte", "lte"))))
    return {"field": field, "op": "range", **{b: draw(st.sampled_from(DATES)) for b in bounds}}


SHAPES = {
    "identifier": ("ids", "text"),
    "lexical": ("text",),
    "conceptual": ("text",),
    "broad_question": ("text",),
    "dependency": ("ids", "pattern"),
    "symbol_relation": ("entities", "ids"),
}


@st.composite
def queries(draw: st.DrawFn, query_class: str) -> dict[str, Any]:
    # Mostly a query the class can be served with; sometimes any shape at all.
    shapes = SHAPES[query_class] if draw(st.integers(0, 3)) else ("text", "ids", "entities", "text+ids", "pattern")
    shape = draw(st.sampled_from(shapes))
    query: dict[str, Any] = {}
    if "text" in shape:
        query["text"] = draw(st.sampled_from(("SCRAM authentication bypass", "CVE-2024-31337", "fsync stall")))
    if "ids" in shape:
        query["ids"] = draw(
            st.lists(st.sampled_from(("ksa-2024-003", "adr-0007", "chunk:x#0")), min_size=1, max_size=2)
        )
    if shape in ("entities", "pattern"):
        query["entities"] = ["kestrel"]
    if shape == "pattern":
        query["pattern"] = {"relations": ["cites"], "depth": draw(st.integers(1, 3))}
    return query


@st.composite
def obligations(draw: st.DrawFn, node_id: str) -> dict[str, Any]:
    query_class = draw(st.sampled_from([q.value for q in QueryClass]))
    coverage = [c.value for c in SearchCoverage]
    ob: dict[str, Any] = {
        "id": node_id,
        "kind": draw(st.sampled_from([k.value for k in ObligationKind])),
        "query": draw(queries(query_class)),
        "query_class": query_class,
        "hard_filters": draw(st.lists(filters(), max_size=3)),
        "soft_filters": draw(st.lists(filters(), max_size=1)),
        "k": draw(st.integers(1, 50)),
        "required_coverage": draw(st.sampled_from(["heuristic", "heuristic", *coverage])),
        "egress": draw(st.sampled_from(("local", "remote_ok"))),
        "mandatory": draw(st.booleans()),
    }
    if draw(st.booleans()):
        ob["freshness"] = {"as_of": draw(st.sampled_from(DATES))}
    if draw(st.integers(0, 3)) == 0:
        ob["strategy"] = draw(st.sampled_from([s.value for s in Strategy]))
    if draw(st.integers(0, 3)) == 0:
        ob["allow_contracts"] = draw(st.lists(st.sampled_from([*RSC_IDS, "no.such_contract"]), min_size=1, max_size=3))
    return ob


def _operator(draw: st.DrawFn, node_id: str, kind: str, inputs: list[str]) -> dict[str, Any]:
    if kind == "join":
        return {"id": node_id, "op": kind, "left": inputs[0], "right": inputs[1], "via": "cites"}
    if kind == "oppose":
        return {"id": node_id, "op": kind, "support": inputs[0], "refutation": inputs[1]}
    if kind == "refine":
        order = draw(st.sampled_from((None, "date_desc", "date_asc")))
        refine: dict[str, Any] = {"id": node_id, "op": kind, "input": inputs[0]}
        refine["filters"] = draw(st.lists(filters(), max_size=2))
        return refine | ({"order_by": order} if order else {})
    if kind == "freshen":
        mode = draw(st.sampled_from(("drop", "mark")))
        return {"id": node_id, "op": kind, "input": inputs[0], "as_of": draw(st.sampled_from(DATES)), "mode": mode}
    op: dict[str, Any] = {"id": node_id, "op": kind, "inputs": inputs}
    if kind == "cascade":
        op["min_hits"] = draw(st.integers(1, 3))
    if kind == "corroborate":
        op["min_independent"] = draw(st.integers(1, 3))
    return op


def _arity(kind: str) -> tuple[int, int]:
    return {"join": (2, 2), "oppose": (2, 2), "refine": (1, 1), "freshen": (1, 1)}.get(kind, (1, 4))


@st.composite
def plans(draw: st.DrawFn, *, twins: bool = False) -> dict[str, Any]:
    """A valid plan: every operator reads earlier nodes, the last one reads what nobody read.

    With ``twins``, the first operator is always a cascade over two stages that ask the same
    thing through different contracts.
    """
    total = draw(st.integers(4 if twins else 1, 40))
    n_obs = total if total == 1 else draw(st.integers(2 if twins else 1, total - 2 if twins else total - 1))
    obs = [draw(obligations(f"o{i}")) for i in range(n_obs)]
    pool = [o["id"] for o in obs]
    unread = list(pool)
    ops: list[dict[str, Any]] = []
    first = 0
    if twins or (n_obs >= 2 and total - n_obs >= 2 and draw(st.booleans())):
        # A cascade over twins: the same request through different contracts (OrderCascadeByCost).
        serving = sorted({c.rsc_id for c in EVERY if obs[0]["query_class"] in c.query_classes})
        stage = st.lists(st.sampled_from(serving), min_size=1, max_size=1 if twins else 2)
        exact = [f for f in obs[0]["hard_filters"] if f.get("op", "eq") == "eq"]
        obs[0] = dict(obs[0], hard_filters=exact, allow_contracts=draw(stage))
        twin = dict(obs[0], id=obs[-1]["id"], allow_contracts=draw(stage))
        if draw(st.booleans()):
            twin["strategy"] = draw(st.sampled_from([s.value for s in Strategy]))
        obs[-1] = twin
        stages = draw(st.permutations([obs[0]["id"], twin["id"]]))
        ops.append(_operator(draw, "p0", "cascade", stages))
        unread = [n for n in unread if n not in stages] + ["p0"]
        pool.append("p0")
        first = 1
    for i in range(first, total - n_obs - 1):
        kinds = [k for k in (*VARIADIC, "join", "oppose", "refine", "freshen") if _arity(k)[0] <= len(pool)]
        kind = draw(st.sampled_from(kinds))
        low, high = _arity(kind)
        # Mostly read nodes nobody reads yet (a tree), sometimes any earlier node (shared sub-DAGs).
        source = unread if len(unread) >= low and draw(st.integers(0, 3)) > 0 else pool
        inputs = draw(st.lists(st.sampled_from(source), min_size=low, max_size=min(high, len(source)), unique=True))
        ops.append(_operator(draw, f"p{i}", kind, inputs))
        unread = [n for n in unread if n not in inputs] + [f"p{i}"]
        pool.append(f"p{i}")
    if total > n_obs:
        kinds = [k for k in (*VARIADIC, "join", "oppose", "refine", "freshen") if _arity(k)[0] == len(unread)]
        kinds += [k for k in VARIADIC if k not in kinds and len(unread) <= 4]
        kind = draw(st.sampled_from(kinds or ["union"]))
        root = f"p{len(ops)}"
        extra = (
            [] if kind in ("join", "oppose", "refine", "freshen") else draw(st.lists(st.sampled_from(pool), max_size=2))
        )
        ops.append(_operator(draw, root, kind, unread + [n for n in dict.fromkeys(extra) if n not in unread]))
    else:
        root = obs[0]["id"]
    plan: dict[str, Any] = {
        "schema_version": "race.plan/1",
        "root": root,
        "obligations": draw(st.permutations(obs)),
        "operators": draw(st.permutations(ops)),
    }
    if draw(st.integers(0, 2)) == 0:
        plan["budget"] = {
            "max_alternatives_per_group": draw(st.integers(1, 8)),
            "max_memo_alternatives": draw(st.integers(total, 4 * total)),
        }
    return plan


def _compile(plan: dict[str, Any], contracts: tuple[Contract, ...], stats: Statistics) -> Explain:
    return compile_plan(plan_from_dict(plan), contracts=contracts, backend_generations=GENERATIONS, stats=stats)


def check_explain(plan: dict[str, Any], explain: Explain) -> None:
    logical = plan_from_dict(plan)
    obligations = {o.id: o for o in logical.obligations}
    operators = {o.id: o for o in logical.operators}
    groups = {g.logical: g for g in explain.groups}
    nodes = walk(explain.physical)
    legs = [leg for n in nodes if isinstance(n, HybridNode) for leg in n.legs]

    # (d) every physical node names a logical node and its group (I1)
    assert set(groups) == set(obligations) | set(operators)
    for node in [*nodes, *legs]:
        assert node.node in groups, node.node
        assert node.group == groups[node.node].id, (node.node, node.group)
    assert {g.id for g in explain.groups} == set(range(1, len(explain.groups) + 1))
    assert explain.groups[0].logical == logical.root

    # (a) every obligation is served by a scan, a hybrid or an unsatisfiable node; no filter dropped
    leaves = [n for n in nodes if isinstance(n, ScanNode | HybridNode | UnsatisfiableNode)]
    assert {n.node for n in leaves} == set(obligations)
    assert {n.node for n in nodes if isinstance(n, OperatorNode)} == set(operators)
    for scan in [n for n in nodes if isinstance(n, ScanNode)] + legs:
        translated = {f.describe() for f in (*scan.request.pushed, *scan.request.residual)}
        assert {f.describe() for f in obligations[scan.node].hard_filters} <= translated, scan.node

    # (b) no chosen alternative, and no revision, lowers a required coverage
    for leaf in leaves:
        required = obligations[leaf.node].required_coverage
        if isinstance(leaf, UnsatisfiableNode):
            assert leaf.gaps, leaf.node
            assert not any(a.chosen for a in groups[leaf.node].alternatives)
        else:
            assert leaf.reach.rank >= required.rank, (leaf.node, leaf.reach, required)
    for group in explain.groups:
        chosen = [a for a in group.alternatives if a.chosen]
        assert len(chosen) <= 1
        if group.logical in obligations:
            for alt in chosen:
                assert alt.eligible and alt.reach.rank >= group.required.rank
        else:
            assert len(chosen) == 1, group.logical
            plain = [a for a in group.alternatives if a.rule == "ImplementOperator"]
            if chosen[0].revision is not None and plain:
                assert chosen[0].reach.rank >= plain[0].reach.rank
        for alt in group.alternatives:
            assert alt.chosen or alt.rejected_because, (group.logical, alt.rule, alt.rsc)
    for revision in explain.revisions:
        chosen_rules = [a.rule for a in groups[revision.logical].alternatives if a.chosen]
        assert chosen_rules == [revision.rule]

    # (e) bounds, with every cut recorded
    budget = logical.budget
    bounds = explain.bounds
    assert bounds.groups == len(explain.groups)
    assert all(len(g.alternatives) <= budget.max_alternatives_per_group for g in explain.groups)
    assert bounds.alternatives == sum(len(g.alternatives) for g in explain.groups) <= budget.max_memo_alternatives
    assert bounds.pruned == sum(len(g.pruned) for g in explain.groups)
    assert set(bounds.memo_limited) <= {g.logical for g in explain.groups if g.pruned}


@SETTINGS
@given(
    plan=plans(),
    contracts=st.sampled_from(sorted(CONTRACT_SETS)),
    stats=st.sampled_from(sorted(STATISTICS)),
    listing=st.randoms(use_true_random=False),
)
def test_random_plans_keep_the_planner_invariants(
    plan: dict[str, Any], contracts: str, stats: str, listing: Any
) -> None:
    used, statistics = CONTRACT_SETS[contracts], STATISTICS[stats]
    explain = _compile(plan, used, statistics)
    check_explain(plan, explain)

    # (c) deterministic bytes: again, and from the same plan listed in another order
    again = _compile(plan, used, statistics)
    assert render_json(again) == render_json(explain)
    assert render_text(again) == render_text(explain)
    shuffled = dict(plan, obligations=list(plan["obligations"]), operators=list(plan["operators"]))
    listing.shuffle(shuffled["obligations"])
    listing.shuffle(shuffled["operators"])
    assert render_json(_compile(shuffled, used, statistics)) == render_json(explain)

    # (e) pruning only drops alternatives that would have lost: the chosen plan is the same
    roomy = dict(plan, budget={"max_alternatives_per_group": 64, "max_memo_alternatives": 100_000})
    unbounded = _compile(roomy, used, statistics)
    assert unbounded.bounds.pruned == 0
    assert unbounded.fingerprints.physical == explain.fingerprints.physical
    assert canonical_json(unbounded.physical) == canonical_json(explain.physical)


@settings(SETTINGS, max_examples=40)
@given(plan=plans(twins=True), stats=st.sampled_from(sorted(STATISTICS)))
def test_random_plans_with_equivalent_cascade_stages(plan: dict[str, Any], stats: str) -> None:
    explain = _compile(plan, EVERY, STATISTICS[stats])
    check_explain(plan, explain)
    assert render_json(_compile(plan, EVERY, STATISTICS[stats])) == render_json(explain)
    group = next(g for g in explain.groups if g.logical == "p0")
    reorders = [a for a in group.alternatives if a.rule == "OrderCascadeByCost"]
    if not reorders:  # a tight budget cut it, and says so
        assert any(note.startswith("OrderCascadeByCost ") for note in group.pruned)
        return
    [reorder] = reorders
    if reorder.chosen:
        [revision] = [r for r in explain.revisions if r.logical == "p0"]
        assert revision.rule == "OrderCascadeByCost" and revision.detail == reorder.revision
    else:
        assert reorder.rejected_because


@pytest.mark.parametrize("name", ["showcase", "cascade_equivalent_stages", "cascade_lexical"])
def test_fixture_plans_keep_the_planner_invariants(name: str) -> None:
    plan = plan_from_dict(__import__("json").loads((FIXTURES / "plans" / f"{name}.json").read_text()))
    data = plan.model_dump(mode="json")
    for stats in STATISTICS.values():
        check_explain(data, _compile(data, EVERY, stats))


def _tiny(name: str, per_group: int, memo: Callable[[int], int]) -> tuple[dict[str, Any], Explain]:
    plan = __import__("json").loads((FIXTURES / "plans" / f"{name}.json").read_text())
    nodes = len(plan["obligations"]) + len(plan.get("operators", []))
    plan["budget"] = {"max_alternatives_per_group": per_group, "max_memo_alternatives": memo(nodes)}
    return plan, _compile(plan, EVERY, STATISTICS["broad"])


def test_tiny_bounds_force_pruning_and_the_explain_records_it() -> None:
    plan, explain = _tiny("showcase", 1, lambda nodes: nodes)
    check_explain(plan, explain)
    assert all(len(g.alternatives) == 1 for g in explain.groups)
    assert explain.bounds.alternatives == len(explain.groups) == explain.bounds.max_memo_alternatives
    assert explain.bounds.pruned > 0
    text = render_text(explain)
    assert "(max 1/group," in text
    assert "pruned: ScanContract" in text and "over max_alternatives_per_group=1" in text
    # The cut never removes the alternative that would have been chosen.
    roomy = dict(plan, budget={})
    assert explain.fingerprints.physical == _compile(roomy, EVERY, STATISTICS["broad"]).fingerprints.physical


def test_the_memo_bound_reserves_room_for_every_group_and_says_where_it_cut() -> None:
    plan, explain = _tiny("showcase", 4, lambda nodes: nodes + 2)
    check_explain(plan, explain)
    assert explain.bounds.alternatives <= explain.bounds.max_memo_alternatives
    assert explain.bounds.memo_limited
    text = render_text(explain)
    assert f"memo bound reached at: {', '.join(explain.bounds.memo_limited)}" in text
    assert "over max_memo_alternatives=" in text
    for group in explain.groups:
        if group.logical in explain.bounds.memo_limited:
            assert group.pruned and all("max_memo_alternatives" in note for note in group.pruned)


def test_a_memo_bound_below_the_node_count_is_refused() -> None:
    plan = (
        (FIXTURES / "plans" / "showcase.json")
        .read_text()
        .replace('"budget": {', '"budget": {"max_memo_alternatives": 2, ')
    )
    with pytest.raises(BoundExceeded, match=r"budget.max_memo_alternatives is 2"):
        parse_plan(plan)


# -- the plan cache key (benchmarks/bench_planner.py times its hit) ---------------------------


@settings(SETTINGS, max_examples=25)
@given(plan=plans())
def test_the_plan_digest_is_the_plans_own_fingerprint(plan: dict[str, Any]) -> None:
    # As given (not normalized): the logical fingerprint is still that of the normal form.
    as_given = LogicalPlan.model_validate(plan)
    assert logical_fingerprint(as_given) == fingerprint(normalize(as_given)) == fingerprint(plan_from_dict(plan))
    logical = plan_from_dict(plan)
    assert plan_digest(logical) == fingerprint(logical) == plan_digest(logical)
    assert plan_digest(logical.model_copy()) == plan_digest(logical)
    changed = logical.model_copy(update={"budget": logical.budget.model_copy(update={"deadline_ms": 1})})
    assert plan_digest(changed) == fingerprint(changed) != plan_digest(logical)


def test_a_changed_plan_generation_or_statistics_never_hits_the_plan_cache() -> None:
    from race.engine import Engine

    plan = parse_plan((FIXTURES / "plans" / "showcase.json").read_bytes())
    engine = Engine({}, extra_contracts=KNOWN, statistics=STATISTICS["empty"])
    first, hit = engine._plan(plan, GENERATIONS, "plan")
    assert not hit
    assert engine._plan(plan, GENERATIONS, "plan") == (first, True)
    assert engine._plan(parse_plan((FIXTURES / "plans" / "showcase.json").read_bytes()), GENERATIONS, "plan")[1]
    # Another plan, another backend generation, another caller generation: all misses.
    other_k = plan.model_copy(
        update={"obligations": (plan.obligations[0].model_copy(update={"k": 7}), *plan.obligations[1:])}
    )
    assert not engine._plan(other_k, GENERATIONS, "plan")[1]
    assert not engine._plan(plan, {**GENERATIONS, "tantivy": "tantivy:next"}, "plan")[1]
    caller = plan.model_copy(update={"generations": plan.generations.model_copy(update={"authority": "2"})})
    assert not engine._plan(caller, GENERATIONS, "plan")[1]
    # The one mutable field of a plan, changed in place, is seen.
    plan.contracts["tantivy.bm25"] = ">=1.0.0"
    again, hit = engine._plan(plan, GENERATIONS, "plan")
    assert not hit and again.fingerprints.plan != first.fingerprints.plan
    # Other statistics: an engine with them plans afresh.
    broad = Engine({}, extra_contracts=KNOWN, statistics=STATISTICS["broad"])
    broad.plan_cache = engine.plan_cache
    assert not broad._plan(plan, GENERATIONS, "plan")[1]
