"""How the planner translates an ``any_of`` group under one contract (I4): as its weakest
member, never better — a postfilter member makes the group a postfilter, a member inside a
filtered ANN a filtered ANN with no recall promised, a member the contract cannot apply (or
cannot take inside an OR) makes the contract ineligible."""

from __future__ import annotations

from planner.matching import translate
from rsc import Contract, Filter, FilterOp, FilterSupport, FilterSupportClass, SearchCoverage, load_contract
from tests.conftest import ROOT

FLAT = load_contract(ROOT / "backends" / "lancedb" / "rsc" / "lancedb.flat_prefilter.json")


def _with(**supports: FilterSupport) -> Contract:
    return FLAT.model_copy(update={"filters": {**FLAT.filters, **supports}})


def _group(*members: dict[str, object]) -> Filter:
    return Filter.model_validate({"op": "any_of", "any_of": list(members)})


GROUP = _group({"field": "doc_type", "op": "ne", "value": "blog"}, {"field": "status", "op": "exists"})


def test_every_member_exact_is_an_exact_prefilter() -> None:
    found = translate(FLAT, (GROUP,))
    assert [loss.translation for loss in found.losses] == ["pushed_exact"]
    assert found.pushed == (GROUP,) and not found.residual
    assert found.reach is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT


def test_a_postfilter_member_makes_the_whole_group_a_postfilter() -> None:
    ops = (FilterOp.EQ, FilterOp.IN, FilterOp.EXISTS, FilterOp.ANY_OF)
    contract = _with(status=FilterSupport(support=FilterSupportClass.POSTFILTER_ONLY, ops=ops))
    found = translate(contract, (GROUP,))
    assert [loss.translation for loss in found.losses] == ["residual_postfilter"]
    assert found.residual == (GROUP,) and not found.pushed
    assert found.reach is SearchCoverage.HEURISTIC
    assert found.losses[0].field == "doc_type,status"


def test_a_filtered_ann_member_promises_no_recall() -> None:
    ops = (FilterOp.EQ, FilterOp.IN, FilterOp.EXISTS, FilterOp.ANY_OF)
    ann = FilterSupport(support=FilterSupportClass.NATIVE_FILTERED_ANN, ops=ops, profile="ivf", recall=0.99)
    found = translate(_with(status=ann), (GROUP,))
    assert [(loss.translation, loss.recall) for loss in found.losses] == [("pushed_ann", None)]
    assert found.reach is SearchCoverage.HEURISTIC


def test_a_member_the_contract_cannot_apply_makes_it_ineligible() -> None:
    unsupported = _with(status=FilterSupport(support=FilterSupportClass.UNSUPPORTED, ops=()))
    assert translate(unsupported, (GROUP,)).impossible
    # A field filterable alone but not inside an OR: its ops lack any_of.
    alone = FilterSupport(support=FilterSupportClass.NATIVE_PREFILTER_EXACT, ops=(FilterOp.EQ, FilterOp.EXISTS))
    found = translate(_with(status=alone), (GROUP,))
    assert found.impossible and "any_of" in found.impossible[0]
    assert translate(_with(status=alone), (Filter(field="status", op=FilterOp.EXISTS),)).pushed


def test_an_operator_the_field_lacks_makes_it_ineligible() -> None:
    keyword_only = FilterSupport(support=FilterSupportClass.NATIVE_PREFILTER_EXACT, ops=(FilterOp.EQ, FilterOp.IN))
    found = translate(_with(status=keyword_only), (Filter(field="status", op=FilterOp.NE, value="x"),))
    assert found.impossible == ("hard filter status != 'x': op ne unsupported",)
