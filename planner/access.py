"""Candidates per access kind: how many rows, vectors or nodes one scan is expected to touch.

A contract's cost is ``round trips x base latency + candidates x price per candidate + hits x
price per hit`` (and its model calls); what a candidate is depends on how the backend reads:

* ``exact`` — every row the pushed filters keep: rows x selectivity;
* ``ann`` — the vectors in the probed IVF partitions, rows x probes / partitions (the index's
  facts), widened until ``k`` rows pass the filters: at least k / selectivity;
* ``graph`` — the nodes a walk is expected to reach from its seeds: seeds x (1 + d + ... + d^h)
  with ``d`` the graph's mean degree and ``h`` the hops (0 a lookup, 1 neighbours, the
  pattern's depth up to the contract's ``max_hops`` for a traversal), capped by the graph's
  nodes and the pattern's node budget;
* ``remote`` — one round trip per scan (the protocol has no paging) plus the server's exact
  candidates.

Where the index offers no facts (no IVF sizes, no degree) the estimate uses the prior formula
and says so. Pure: the same inputs give the same figures.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from rsc import BackendStatistics, Contract, CoverageClaim, Query

PRIOR_DEGREE = 2.0
"""Edges per node assumed for a graph that reports no degree statistics."""
GRAPH_HOPS = {"graph_identity": 0, "graph_neighbors": 1}
"""Hops of the graph modes that do not read them from the query's pattern."""


class Access(NamedTuple):
    candidates: float
    """Rows, vectors or nodes the scan is expected to touch."""
    hits: float
    """Hits it is expected to return."""
    round_trips: int
    """Calls it makes (each pays the base latency)."""
    how: str
    """How the candidates follow, in words (explain's ``access``)."""


def kind_of(contract: Contract) -> str:
    """The contract's access kind: its cost hint's, else what its claim and backend imply."""
    if contract.cost.kind is not None:
        return contract.cost.kind
    if contract.coverage.claim is CoverageClaim.APPROXIMATE:
        return "ann"
    if contract.mode.startswith("graph_"):
        return "graph"
    if contract.egress == "remote":
        return "remote"
    return "exact"


def candidates_of(
    contract: Contract, *, rows: int, sel: float, k: int, stats: BackendStatistics | None, query: Query | None
) -> Access:
    kind = kind_of(contract)
    facts = stats.access if stats is not None else {}
    if kind == "ann":
        return _ann(rows, sel, k, facts)
    if kind == "graph":
        return _graph(contract, rows, sel, k, facts, query)
    exact = max(1.0, rows * sel)
    if kind == "remote":
        how = "remote: 1 round trip x base latency; server scan rows x selectivity"
        return Access(exact, min(float(k), exact), 1, how)
    return Access(exact, min(float(k), exact), 1, "exact scan: rows x selectivity")


def _ann(rows: int, sel: float, k: int, facts: dict[str, float]) -> Access:
    partitions, probes = facts.get("ann_partitions"), facts.get("ann_probes")
    hits = float(min(k, rows))
    if partitions and probes:
        probed = rows * min(probes / partitions, 1.0)
        needed = k / max(sel, 1.0 / max(rows, 1))
        found = min(float(rows), max(probed, needed, float(k)))
        how = f"ANN probes: rows x {probes:g}/{partitions:g} partitions probed, at least k / selectivity"
        return Access(found, hits, 1, how)
    # No IVF facts: an ANN probe touches a roughly constant slice of the table; a filter it
    # must honour makes it search further for k survivors.
    probe = max(k * 10.0, 10.0 * math.sqrt(rows))
    found = min(float(rows), probe / max(sel, 1e-3) ** 0.5)
    return Access(found, hits, 1, "ANN probe max(10k, 10 sqrt(rows)) / sqrt(selectivity) (no IVF facts)")


def _graph(contract: Contract, rows: int, sel: float, k: int, facts: dict[str, float], query: Query | None) -> Access:
    seeds = max(1, len(query.ids) + len(query.entities)) if query is not None else 1
    pattern = query.pattern if query is not None else None
    hops = GRAPH_HOPS.get(contract.mode)
    if hops is None:
        hops = pattern.depth if pattern is not None else 1
        if contract.cost.max_hops is not None:
            hops = min(hops, contract.cost.max_hops)
    degree = facts.get("mean_degree")
    basis = f"mean degree {degree:g}" if degree is not None else f"no degree statistics, assumed {PRIOR_DEGREE:g}"
    d = PRIOR_DEGREE if degree is None else degree
    if pattern is not None and pattern.direction == "both":
        d *= 2.0
    reached = float(seeds) * sum(d**h for h in range(hops + 1))
    cap = float(max(rows, 1))
    if pattern is not None and hops > 0:
        cap = min(cap, float(pattern.node_budget))
    reached = min(reached, cap)
    # Metadata filters apply to the reached nodes; seeds are not hits of a walk.
    hits = min(float(k), max(1.0, (reached - (seeds if hops else 0)) * sel))
    how = f"graph walk: {seeds} seed(s) x sum of d^h for h <= {hops} hops ({basis}), capped at {cap:g} nodes"
    return Access(reached, hits, 1, how)
