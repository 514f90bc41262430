"""HybridRrf: a lexical leg and a vector leg fused by reciprocal rank fusion.

Serves ``broad_question`` (and any obligation whose policy asks for hybrid). The legs are
the obligation re-matched as a lexical and as a conceptual query; each leg keeps its own
losses and coverage, and the hybrid is never better covered than its weaker leg.
"""

from __future__ import annotations

from planner.cost import estimate_scan
from planner.matching import match
from planner.memo import Alternative, GroupContext
from planner.physical import EarlyStopVerdict, FusionSpec, HybridNode
from planner.rules.scan_contract import build_scan
from rsc import QueryClass, Strategy, weakest

RULE = "HybridRrf"


def hybrid_rrf(group: GroupContext) -> tuple[Alternative, ...]:
    ob = group.obligation
    if ob is None or ob.query.text is None:
        return ()
    if ob.query_class is not QueryClass.BROAD_QUESTION and ob.strategy is not Strategy.HYBRID:
        return ()
    lexical = [
        m
        for c in group.contracts
        if (m := match(ob.model_copy(update={"query_class": QueryClass.LEXICAL}), c)).eligible
    ]
    vector = [
        m
        for c in group.contracts
        if (m := match(ob.model_copy(update={"query_class": QueryClass.CONCEPTUAL}), c)).eligible
    ]
    if not lexical or not vector:
        missing = "lexical" if not lexical else "vector"
        return (
            Alternative(
                rule=RULE,
                rsc="",
                strategy=Strategy.HYBRID,
                cost=0.0,
                reach=weakest(),
                eligible=False,
                rejected_because=(f"no eligible {missing} leg",),
            ),
        )
    out = []
    for lex in sorted(lexical, key=lambda m: m.rsc):
        for vec in sorted(vector, key=lambda m: m.rsc):
            legs = []
            total = 0.0
            for m in (lex, vec):
                contract = group.contract(m.rsc)
                pushed = tuple(
                    f
                    for f, loss in zip(ob.hard_filters, m.losses, strict=True)
                    if loss.translation != "residual_postfilter"
                )
                residual = tuple(
                    f
                    for f, loss in zip(ob.hard_filters, m.losses, strict=True)
                    if loss.translation == "residual_postfilter"
                )
                est = estimate_scan(contract, k=ob.k, pushed=pushed, stats=group.stats)
                total += est.cost_ms
                legs.append(build_scan(group, m.rsc, pushed=pushed, residual=residual, cost=est.cost_ms, reach=m.reach))
            reach = weakest(lex.reach, vec.reach)
            contracts = [group.contract(m.rsc) for m in (lex, vec)]
            lacking = [c.ref for c in contracts if not (c.early_stop.sorted_access and c.early_stop.random_access)]
            verdict = EarlyStopVerdict(
                admissible=not lacking,
                reason="every leg declares sorted and random access; RRF is monotone in ranks"
                if not lacking
                else f"full evaluation: {', '.join(lacking)} lack sorted+random access",
            )
            out.append(
                Alternative(
                    rule=RULE,
                    rsc=f"{lex.rsc} + {vec.rsc}",
                    strategy=Strategy.HYBRID,
                    # Legs run concurrently: latency is the slower leg, plus fusion.
                    cost=round(max(leg.cost for leg in legs) + 0.05, 6),
                    reach=reach,
                    losses=lex.losses + vec.losses,
                    model_calls=lex.model_calls + vec.model_calls,
                    eligible=True,
                    early_stop=verdict,
                    implementation=HybridNode(
                        node=ob.id,
                        group=group.group_id,
                        legs=tuple(legs),
                        fusion=FusionSpec(),
                        reach=reach,
                        early_stop=verdict,
                    ),
                )
            )
    return tuple(out)
