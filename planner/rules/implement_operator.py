"""ImplementOperator: an operator over the best alternatives of its input groups."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from planner.memo import Alternative, GroupContext
from planner.operators import CascadeOp, LogicalOperator, RefineOp, UnionOp
from planner.physical import RRF, EarlyStopVerdict, FusionSpec, OperatorNode, ScanNode, verdict_of
from planner.rules.cascade_stages import weaker_stage_first
from rsc import Contract, OperatorKind, ScoreKind, SearchCoverage, weakest

RULE = "ImplementOperator"
_CONCURRENT = {"union", "intersect", "corroborate", "oppose", "join"}
# Top-k aggregations are what early stop could cut short; every fusing node, oppose too (its
# support and refutation legs share one ranking), tells explain how the runtime orders it.
_AGGREGATIONS = {"union", "intersect", "corroborate"}
_FUSING = _AGGREGATIONS | {"oppose"}


def implement_operator(group: GroupContext) -> tuple[Alternative, ...]:
    op = group.operator_of(group.node_id)
    if op is None:
        return ()
    inputs = op.inputs_of()
    children = [group.chosen_children.get(i) for i in inputs]
    if any(c is None or c.implementation is None for c in children):
        missing = [i for i, c in zip(inputs, children, strict=True) if c is None or c.implementation is None]
        raise AssertionError(f"child groups {missing} were not planned before {op.id}")
    chosen = [c for c in children if c is not None]
    costs = [c.cost for c in chosen]
    # Concurrent inputs cost the slowest one; later stages of a cascade or fallback run only
    # sometimes, so they count at half.
    cost = max(costs) if op.op in _CONCURRENT else costs[0] + 0.5 * sum(costs[1:])
    reach = _reach(op, [c.reach for c in chosen])
    fusion = fusion_of(op, chosen, group)
    if fusion is not None and fusion.method == "score_sum":
        # After the inputs' own answers comes at least one more round of reads (deeper sorted
        # access, or random access), as slow as the slowest input: a lower bound, not a guess
        # at how deep the data will make the threshold algorithm read.
        cost = 2 * cost
    verdict = early_stop_verdict(op, chosen, group, fusion)
    node = OperatorNode(
        node=op.id,
        group=group.group_id,
        op=OperatorKind(op.op),
        children=tuple(c.implementation for c in chosen if c.implementation is not None),
        fusion=fusion,
        early_stop=verdict,
    )
    # The plan order of equivalent cascade stages never runs a weaker one before a stronger one.
    weaker_first = weaker_stage_first(op, group) if isinstance(op, CascadeOp) else None
    return (
        Alternative(
            rule=RULE,
            cost=round(cost, 6),
            reach=reach,
            model_calls=sum(c.model_calls for c in chosen),
            eligible=weaker_first is None,
            rejected_because=(weaker_first,) if weaker_first else (),
            early_stop=verdict,
            implementation=node,
        ),
    )


def _reach(op: object, reaches: list[SearchCoverage]) -> SearchCoverage:
    reach = weakest(*reaches)
    if isinstance(op, RefineOp) and op.filters:
        # A filter applied after the input's top-k is a postfilter (I4).
        reach = weakest(reach, SearchCoverage.HEURISTIC)
    return reach


def fusion_of(op: LogicalOperator, chosen: list[Alternative], group: GroupContext) -> FusionSpec | None:
    """Score-sum fusion where every input is a scan under contracts of one score calibration
    that offer random access (each candidate's every score can then be read exactly); RRF
    elsewhere (I11). A union's ``k`` keeps only the best ``k``."""
    if op.op not in _FUSING:
        return None
    top_k = op.k if isinstance(op, UnionOp) else None
    contracts = _scan_contracts(chosen, group)
    if (
        op.op == "union"
        and contracts
        and len({c.score_calibration for c in contracts}) == 1
        and contracts[0].score_calibration is not None
        and len({c.score_kind for c in contracts}) == 1
        and all(c.early_stop.random_access for c in contracts)
    ):
        return fusion_spec("score_sum", top_k, contracts[0].score_kind)
    return RRF if top_k is None else fusion_spec("rrf", top_k, None)


@lru_cache(maxsize=256)
def fusion_spec(method: Literal["rrf", "score_sum"], top_k: int | None, score_kind: ScoreKind | None) -> FusionSpec:
    return FusionSpec(method=method, top_k=top_k, score_kind=score_kind)


def _scan_contracts(chosen: list[Alternative], group: GroupContext) -> list[Contract]:
    """The contract of every input, or nothing when an input is not a plain scan."""
    out = []
    for alt in chosen:
        if not isinstance(alt.implementation, ScanNode):
            return []
        out.append(group.contract(alt.implementation.rsc))
    return out


def early_stop_verdict(
    op: LogicalOperator, chosen: list[Alternative], group: GroupContext, fusion: FusionSpec | None
) -> EarlyStopVerdict:
    """Fagin's threshold algorithm needs a top-k, a monotone aggregation of calibrated scores and
    exact sorted and random access on every input (I9); everything else is evaluated in full."""
    if op.op not in _AGGREGATIONS:
        return verdict_of(admissible=False, reason=f"{op.op} is not a top-k aggregation; full evaluation")
    if op.op == "corroborate":
        return verdict_of(admissible=False, reason="corroborate counts every origin; full evaluation")
    if op.op == "intersect":
        return verdict_of(admissible=False, reason="intersect keeps what every input found; full evaluation")
    if fusion is None or fusion.top_k is None:
        return verdict_of(admissible=False, reason="union without k keeps everything its inputs found; full evaluation")
    if fusion.method == "rrf":
        return verdict_of(
            admissible=False,
            reason="full evaluation: RRF fuses ranks of scores without one calibration, and no input offers "
            "random access to a rank",
        )
    lacking = sorted({c.ref for c in _scan_contracts(chosen, group) if not c.early_stop.sorted_access})
    if lacking:
        return verdict_of(admissible=False, reason=f"full evaluation: {', '.join(lacking)} lack exact sorted access")
    return verdict_of(
        admissible=True,
        reason="threshold algorithm: every input declares exact sorted and random access, and the sum of "
        "calibrated similarities is monotone",
    )
