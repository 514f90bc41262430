"""EXPLAIN ANALYZE: the chosen physical plan beside what its run did.

Each physical node gets the estimate that chose it (latency, candidates, the rows it should
return, model calls, the recall promised) and what its legs measured (time, rows, model calls,
cache outcome); each scan gets the q-error of its estimates, ``max(est/act, act/est)``. The
analysis lives in ``operational``: it is figures about one run, never part of the normalized
receipt, and it changes no choice, coverage or status (I2).
"""

from __future__ import annotations

import statistics as stats_module
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from planner import Explain, HybridNode, OperatorNode, PhysicalNode, ScanNode, Statistics, estimate_scan
from planner.cost import base_latency
from planner.explain import describe_recall
from rsc import CanonicalFloat, Contract, CoverageClaim, Record

ANALYSIS_SCHEMA_VERSION = "race.analyze/1"
_FLOOR_MS = 0.01
"""A time below this (a cache hit read from memory) is counted as this in a q-error: a ratio to
zero means nothing."""


class NodeAnalysis(Record):
    """One physical node: its estimate beside what the run measured."""

    node: str
    """The logical node it serves."""
    group: int
    """Its memo group."""
    kind: Literal["scan", "hybrid", "operator", "unsatisfiable"]
    """The physical node's kind."""
    depth: int
    """Its depth in the tree (the root is 0)."""
    name: str
    """What it is: the contract a scan reads, an operator's name, ``hybrid``."""
    leg: str = ""
    """A scan's key in ``operational.legs`` (``obligation/contract``)."""
    backend: str = ""
    """A scan's backend."""
    k: int | None = None
    """A scan's k."""
    estimated_ms: CanonicalFloat | None = None
    """The estimate the optimizer chose it by, in milliseconds."""
    base_ms: CanonicalFloat | None = None
    """The part of a scan's estimate that is its contract's base latency."""
    candidate_ms: CanonicalFloat | None = None
    """The part of a scan's estimate that follows its candidates (the rest is the base latency and
    the model calls): learned statistics take it out of what they learn."""
    actual_ms: CanonicalFloat | None = None
    """A scan's measured leg time; a hybrid's slowest leg (its legs run at once)."""
    estimated_candidates: CanonicalFloat | None = None
    """The candidates the cost model expected a scan to touch."""
    table_rows: int | None = None
    """The rows the cost model took the scanned table to hold."""
    selectivity: CanonicalFloat | None = None
    """The fraction of them the pushed filters were expected to keep."""
    estimated_rows: CanonicalFloat | None = None
    """The rows a scan was expected to return: ``min(k, candidates)``."""
    actual_rows: int | None = None
    """The rows (hits) it returned."""
    model_calls_planned: int | None = None
    """The model calls the plan counted for it."""
    model_calls_made: int | None = None
    """The model calls its legs made (a cached query vector is not a call)."""
    cache: str = ""
    """The result cache outcome of a scan's leg: ``hit``, ``miss`` or ``none``."""
    outcome: str = ""
    """How a scan's leg ended (``ok``, ``timeout``, …); ``not run`` when the run never reached it."""
    recall: str = ""
    """The recall promised: ``exact`` for an exhaustive contract, the calibrated bound for an ANN one."""
    q_error_ms: CanonicalFloat | None = None
    """``max(est/act, act/est)`` of the latency (1 is a perfect estimate)."""
    q_error_rows: CanonicalFloat | None = None
    """``max(est/act, act/est)`` of the rows returned (both counted at least 1)."""


class QErrors(Record):
    """The q-errors of a plan's scans that ran (a cache hit's time is no estimate's test)."""

    scans: int
    """The scans that ran against their backend (cache misses)."""
    latency_max: CanonicalFloat | None = None
    """The worst latency q-error."""
    latency_median: CanonicalFloat | None = None
    """The median latency q-error."""
    rows_max: CanonicalFloat | None = None
    """The worst rows q-error."""
    rows_median: CanonicalFloat | None = None
    """The median rows q-error."""


class Analysis(Record):
    """``race run --analyze``: the chosen plan's tree, estimates against actuals, where the time went."""

    schema_version: str = ANALYSIS_SCHEMA_VERSION
    """Always ``race.analyze/1``."""
    plan: str
    """The plan fingerprint."""
    physical: str
    """The physical plan fingerprint."""
    statistics: str
    """The fingerprint of the statistics the plan was costed with."""
    nodes: tuple[NodeAnalysis, ...]
    """The physical tree in pre-order (a hybrid's legs follow it, one level deeper)."""
    q_error: QErrors
    """The plan's q-errors."""
    phases: dict[str, CanonicalFloat] = Field(default_factory=dict)
    """Where the run's time went, in milliseconds (``operational.phases``)."""
    wall_ms: CanonicalFloat = 0.0
    """The run's wall time (set-up excluded)."""
    gaps: tuple[str, ...] = ()
    """The receipt's gaps, one line each (``obligation: kind detail``)."""


def q_error(estimate: float, actual: float) -> float:
    """``max(est/act, act/est)``, both floored at a positive value; 1 is a perfect estimate."""
    est, act = max(estimate, _FLOOR_MS), max(actual, _FLOOR_MS)
    return round(max(est / act, act / est), 3)


def analyze(
    explain: Explain,
    *,
    legs: Mapping[str, Mapping[str, Any]],
    contracts: Mapping[str, Contract],
    statistics: Statistics,
    phases: Mapping[str, float],
    wall_ms: float,
    gaps: tuple[str, ...] = (),
) -> Analysis:
    """The analysis of one run of ``explain``'s physical plan from the run's ``operational.legs``."""
    chosen = {g.logical: next((a for a in g.alternatives if a.chosen), None) for g in explain.groups}
    nodes: list[NodeAnalysis] = []
    seen: set[str] = set()

    def visit(node: PhysicalNode, depth: int) -> None:
        alt = chosen.get(node.node)
        if isinstance(node, ScanNode):
            nodes.append(_scan(node, depth, legs, contracts, statistics))
        elif isinstance(node, HybridNode):
            parts = [_scan(leg, depth + 1, legs, contracts, statistics) for leg in node.legs]
            times = [p.actual_ms for p in parts if p.actual_ms is not None]
            nodes.append(
                NodeAnalysis(
                    node=node.node,
                    group=node.group,
                    kind="hybrid",
                    depth=depth,
                    name=f"hybrid {node.fusion.method}",
                    estimated_ms=alt.cost if alt is not None else None,
                    actual_ms=max(times) if times else None,
                    model_calls_planned=sum(leg.model_calls for leg in node.legs),
                    model_calls_made=sum(p.model_calls_made or 0 for p in parts),
                )
            )
            nodes.extend(parts)
        elif isinstance(node, OperatorNode):
            nodes.append(
                NodeAnalysis(
                    node=node.node,
                    group=node.group,
                    kind="operator",
                    depth=depth,
                    name=node.op.value,
                    estimated_ms=alt.cost if alt is not None else None,
                )
            )
            if node.node in seen:
                return
            seen.add(node.node)
            for child in node.children:
                visit(child, depth + 1)
        else:
            nodes.append(NodeAnalysis(node=node.node, group=node.group, kind="unsatisfiable", depth=depth, name="-"))

    visit(explain.physical, 0)
    ran = [n for n in nodes if n.kind == "scan" and n.cache == "miss" and n.outcome == "ok"]
    by_ms = sorted(n.q_error_ms for n in ran if n.q_error_ms is not None)
    by_rows = sorted(n.q_error_rows for n in ran if n.q_error_rows is not None)
    return Analysis(
        plan=explain.fingerprints.plan,
        physical=explain.fingerprints.physical,
        statistics=explain.fingerprints.statistics,
        nodes=tuple(nodes),
        q_error=QErrors(
            scans=len(ran),
            latency_max=by_ms[-1] if by_ms else None,
            latency_median=round(stats_module.median(by_ms), 3) if by_ms else None,
            rows_max=by_rows[-1] if by_rows else None,
            rows_median=round(stats_module.median(by_rows), 3) if by_rows else None,
        ),
        phases=dict(phases),
        wall_ms=wall_ms,
        gaps=gaps,
    )


def _scan(
    node: ScanNode,
    depth: int,
    legs: Mapping[str, Mapping[str, Any]],
    contracts: Mapping[str, Contract],
    statistics: Statistics,
) -> NodeAnalysis:
    request = node.request
    contract = contracts.get(node.rsc)
    candidates = rows = selectivity = base = per_candidates = None
    table_rows: int | None = None
    recall = ""
    if contract is not None:
        # The estimate the scan was costed with, made again from the same inputs (the planner is pure).
        est = estimate_scan(
            contract,
            k=request.k,
            pushed=request.pushed,
            residual=request.residual,
            stats=statistics,
            query=request.query,
        )
        candidates, rows = est.candidates, float(min(request.k, est.candidates))
        table_rows, selectivity = est.rows, est.selectivity
        base = base_latency(contract, statistics)[0]
        per_candidates = round(est.candidates * contract.cost.per_candidate_us / 1000.0, 6)
        recall = "exact" if contract.coverage.claim is not CoverageClaim.APPROXIMATE else ""
    if node.expected_recall is not None:
        recall = describe_recall(node.expected_recall)
    label = f"{node.node}/{node.rsc}"
    leg = legs.get(label)
    actual_ms = float(leg["ms"]) if leg is not None else None
    hits = int(leg["hits"]) if leg is not None else None
    return NodeAnalysis(
        node=node.node,
        group=node.group,
        kind="scan",
        depth=depth,
        name=node.rsc,
        leg=label,
        backend=request.backend,
        k=request.k,
        estimated_ms=node.cost,
        base_ms=base,
        candidate_ms=per_candidates,
        actual_ms=actual_ms,
        estimated_candidates=candidates,
        table_rows=table_rows,
        selectivity=selectivity,
        estimated_rows=rows,
        actual_rows=hits,
        model_calls_planned=node.model_calls,
        model_calls_made=int(leg.get("model_calls", 0)) if leg is not None else None,
        cache=str(leg["cache"]) if leg is not None else "",
        outcome=str(leg["outcome"]) if leg is not None else "not run",
        recall=recall,
        q_error_ms=q_error(node.cost, actual_ms) if actual_ms is not None else None,
        q_error_rows=q_error(max(rows, 1.0), max(hits, 1)) if rows is not None and hits is not None else None,
    )
