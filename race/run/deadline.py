"""The run cut short at its deadline: every node not finished is a ``resource_limited`` gap.

A plan's legs stop starting before its deadline, early enough for the operators to combine
what was read; should even that bookkeeping run late (a very wide plan, a loaded machine),
the executor stops evaluating at its cut (``race.planning.RunClock.cut``) and records here,
cheaply, every node it had not finished: each obligation and operator gets its receipt with
a gap saying so (a leg that failed keeps its own gap, a leg still in flight is ``cancelled``
at the plan deadline, else the node is ``resource_limited``: not reached), and the root's
outcome is empty. The receipt still names every node (I3).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from planner import Obligation, OperatorNode, PhysicalNode, ScanNode, walk
from race.receipt import ObligationReceipt, OperatorReceipt
from race.run.context import RunContext
from race.run.obligations import receipt
from race.run.outcome import Outcome, failed_outcome, gap
from rsc import Gap, GapKind, ObligationStatus, SearchCoverage, SupportClosure


def cut_short(
    ctx: RunContext,
    root: PhysicalNode,
    done: Mapping[str, Outcome],
    obligations: MutableMapping[str, ObligationReceipt],
    operators: MutableMapping[str, OperatorReceipt],
) -> Outcome:
    """Receipts for every node under ``root`` not in ``done``; the root's (empty) outcome."""
    why = _not_reached(ctx)
    in_flight = _in_flight(ctx)
    seen: set[str] = set()
    for node in walk(root):
        if node.node in done or node.node in seen:
            continue
        seen.add(node.node)
        missed = gap(GapKind.RESOURCE_LIMITED, node.node, why)
        if isinstance(node, OperatorNode):
            operators[node.node] = OperatorReceipt(
                id=node.node,
                op=node.op,
                status=ObligationStatus.UNSATISFIED,
                search_coverage=SearchCoverage.UNKNOWN,
                support_closure=SupportClosure.RESOURCE_LIMITED,
                early_stop=node.early_stop.reason,
                gaps=(missed,),
            )
        else:
            # A leg that failed, or was still in flight, is named as such; else it was not reached.
            ob = ctx.obligation(node.node)
            found = list(ctx.legs.failures.get(ob.id, ()))
            found += [ctx.legs.deadline_gap(scan, ob.id) for scan in in_flight.get(ob.id, ())]
            if found:
                obligations[node.node] = receipt(ob, failed_outcome(ob.id, found), served_by=(), model_calls=0)
                continue
            obligations[node.node] = _unreached_receipt(ob, missed)
    return done.get(root.node) or failed_outcome(root.node, (gap(GapKind.RESOURCE_LIMITED, root.node, why),))


def _unreached_receipt(ob: Obligation, missed: Gap) -> ObligationReceipt:
    # What ``receipt`` makes of a failed outcome with this one gap, built without validating
    # known values again: a wide plan's unreached nodes cost the run little.
    return ObligationReceipt.model_construct(
        id=ob.id,
        kind=ob.kind,
        status=ObligationStatus.UNSATISFIED,
        required_coverage=ob.required_coverage,
        search_coverage=SearchCoverage.UNKNOWN,
        support_closure=SupportClosure.RESOURCE_LIMITED,
        model_calls=0,
        mandatory=ob.mandatory,
        served_by=(),
        evidence_count=0,
        gaps=(missed,),
    )


def _in_flight(ctx: RunContext) -> dict[str, list[ScanNode]]:
    """The legs still in flight, by obligation, each obligation's in label order: one pass."""
    found: dict[str, list[ScanNode]] = {}
    for _, (ob, scan) in sorted(ctx.legs.running.items()):
        found.setdefault(ob, []).append(scan)
    return found


def not_reached(ctx: RunContext, node: PhysicalNode) -> Outcome:
    """The outcome of a node the executor did not start because its cut had passed: empty,
    with the ``resource_limited`` gap its parents pass on."""
    return failed_outcome(node.node, (gap(GapKind.RESOURCE_LIMITED, node.node, _not_reached(ctx)),))


def _not_reached(ctx: RunContext) -> str:
    deadline = ctx.legs.deadline_ms
    return f"not reached before the plan deadline of {deadline} ms; absence of hits is not absence of evidence"
