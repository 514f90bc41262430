"""HybridRrf: a lexical leg and a vector leg fused by reciprocal rank fusion.

Serves ``broad_question`` (and any obligation whose policy asks for hybrid). The legs are
the obligation re-matched as a lexical and as a conceptual query; each leg keeps its own
losses and coverage, and the hybrid is never better covered than its weaker leg.
"""

from __future__ import annotations

from planner.matching import Match
from planner.memo import Alternative, GroupContext
from planner.physical import RRF, HybridNode, ScanNode, verdict_of
from planner.rules.scan_contract import build_scan, expected_recall, recall_shortfall
from rsc import Contract, ExpectedRecall, QueryClass, Strategy, weakest

RULE = "HybridRrf"


def hybrid_rrf(group: GroupContext) -> tuple[Alternative, ...]:
    ob = group.obligation
    if ob is None or ob.query.text is None:
        return ()
    if ob.query_class is not QueryClass.BROAD_QUESTION and ob.strategy is not Strategy.HYBRID:
        return ()
    # The obligation re-matched as a lexical and as a conceptual query; a contract that does
    # not serve the class could not be eligible, so it is not matched at all.
    as_lexical = ob.model_copy(update={"query_class": QueryClass.LEXICAL})
    as_vector = ob.model_copy(update={"query_class": QueryClass.CONCEPTUAL})
    lexical = [
        m
        for c in group.contracts
        if QueryClass.LEXICAL in c.query_classes and (m := group.matcher.match(as_lexical, c)).eligible
    ]
    vector = [
        m
        for c in group.contracts
        if QueryClass.CONCEPTUAL in c.query_classes
        and (m := group.matcher.match(as_vector, c)).eligible
        # A vector leg below the obligation's min_recall cannot serve it, here as on its own.
        and recall_shortfall(ob.min_recall, c, _expected(group, c)) is None
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
    built: dict[str, ScanNode] = {}

    def leg(m: Match) -> ScanNode:
        if m.rsc not in built:
            contract = group.contract(m.rsc)
            tr = group.matcher.translation(contract, ob.hard_filters)
            est = group.cost_model.estimate(
                contract, k=ob.k, pushed=tr.pushed, residual=tr.residual, key=tr, query=ob.query
            )
            built[m.rsc] = build_scan(
                group,
                m.rsc,
                pushed=tr.pushed,
                residual=tr.residual,
                cost=est.cost_ms,
                reach=m.reach,
                expected_recall=expected_recall(contract, tr.pushed + tr.residual, group),
            )
        return built[m.rsc]

    out = []
    for lex in sorted(lexical, key=lambda m: m.rsc):
        for vec in sorted(vector, key=lambda m: m.rsc):
            legs = (leg(lex), leg(vec))
            reach = weakest(lex.reach, vec.reach)
            contracts = [group.contract(m.rsc) for m in (lex, vec)]
            kinds = ", ".join(sorted({c.score_kind.value for c in contracts}))
            verdict = verdict_of(
                admissible=False,
                reason=f"full evaluation: RRF fuses ranks of uncalibrated scores ({kinds}), and no leg offers "
                "random access to a rank",
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
                        legs=legs,
                        fusion=RRF,
                        reach=reach,
                        early_stop=verdict,
                    ),
                )
            )
    return tuple(out)


def _expected(group: GroupContext, contract: Contract) -> ExpectedRecall | None:
    ob = group.obligation
    assert ob is not None
    tr = group.matcher.translation(contract, ob.hard_filters)
    return expected_recall(contract, tr.pushed + tr.residual, group)
