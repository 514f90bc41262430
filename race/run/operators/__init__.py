"""Physical operators, one module and one function each, and the table the executor
dispatches on — the runtime mirror of ``planner/rules/``.

Every operator takes its node, its logical operator and the run context, and returns a new
``Outcome``; none changes an input. Most read all their inputs at once (``eager``); cascade,
fallback and a score-sum union decide for themselves which inputs to read, and when.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from planner import OperatorNode
from race.run.context import RunContext
from race.run.operators.cascade import cascade
from race.run.operators.corroborate import corroborate
from race.run.operators.fallback import fallback
from race.run.operators.freshen import freshen
from race.run.operators.intersect import intersect
from race.run.operators.join import join
from race.run.operators.oppose import oppose
from race.run.operators.refine import refine
from race.run.operators.union import union
from race.run.outcome import Outcome
from rsc import OperatorKind

Operator = Callable[[OperatorNode, Any, RunContext], Awaitable[Outcome]]


def eager(fn: Callable[[OperatorNode, Any, Sequence[Outcome], RunContext], Outcome]) -> Operator:
    """An operator over all its inputs' outcomes, read concurrently and given in plan order."""

    async def run(node: OperatorNode, op: Any, ctx: RunContext) -> Outcome:
        return fn(node, op, await ctx.inputs(node.children), ctx)

    run.__name__ = fn.__name__
    return run


OPERATORS: Mapping[OperatorKind, Operator] = {
    OperatorKind.UNION: union,
    OperatorKind.CASCADE: cascade,
    OperatorKind.FALLBACK: fallback,
    OperatorKind.INTERSECT: eager(intersect),
    OperatorKind.JOIN: eager(join),
    OperatorKind.REFINE: eager(refine),
    OperatorKind.CORROBORATE: eager(corroborate),
    OperatorKind.OPPOSE: eager(oppose),
    OperatorKind.FRESHEN: eager(freshen),
}

__all__ = ["OPERATORS", "Operator"]
