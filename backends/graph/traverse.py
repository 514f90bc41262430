"""Bounded breadth-first reach over the graph: the one traversal every graph mode uses.

The walk goes layer by layer from all seeds at once, so each node's hop count is its
distance from the nearest seed. It reads networkx's adjacency dicts directly, as
networkx's own ``single_source_shortest_path_length`` does: the public views add a
wrapper object per lookup, which dominates a walk that touches thousands of nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Direction = Literal["out", "in", "both"]


@dataclass(frozen=True, slots=True)
class Reach:
    """What a bounded walk found.

    ``layers[h]`` holds the nodes first reached at hop ``h`` (sorted; layer 0 is the seeds),
    for every hop up to ``complete_depth``. A walk that met its node budget stops inside
    the next layer; that partial layer is not returned, so the hit set is always "every
    node within ``complete_depth`` hops", whatever order the walk took.
    """

    layers: tuple[tuple[str, ...], ...]
    complete_depth: int
    visited: int
    budget_met: bool


def neighbours(graph: Any, node: str, relations: frozenset[str] | None, direction: Direction) -> Iterator[str]:
    """The nodes one edge away (with repeats when ``direction`` is ``both``)."""
    sides: list[Mapping[str, Mapping[str, Any]]] = []
    if direction in ("out", "both"):
        sides.append(graph._succ[node])
    if direction in ("in", "both"):
        sides.append(graph._pred[node])
    for side in sides:
        if relations is None:
            yield from side
        else:
            for other, keyed in side.items():
                # Edge keys are relation names, so the relation test is a key lookup.
                if not relations.isdisjoint(keyed):
                    yield other


def bounded_reach(
    graph: Any,
    seeds: Iterable[str],
    *,
    relations: frozenset[str] | None,
    direction: Direction,
    depth: int,
    node_budget: int,
) -> Reach:
    """Every node within ``depth`` hops of a seed, unless more than ``node_budget`` nodes would be visited."""
    seen: set[str] = set(seeds)
    frontier = sorted(seen)
    layers: list[tuple[str, ...]] = [tuple(frontier)]
    succ, pred = graph._succ, graph._pred
    for hop in range(1, depth + 1):
        found: list[str] = []
        for node in frontier:
            if relations is None and direction == "out":
                # The common unfiltered case, written out: it is the benchmark's hot loop.
                adjacent: Iterable[str] = succ[node]
            elif relations is None and direction == "in":
                adjacent = pred[node]
            else:
                adjacent = neighbours(graph, node, relations, direction)
            for other in adjacent:
                if other in seen:
                    continue
                if len(seen) >= node_budget:
                    return Reach(tuple(layers), hop - 1, len(seen), True)
                seen.add(other)
                found.append(other)
        if not found:
            break
        found.sort()
        layers.append(tuple(found))
        frontier = found
    return Reach(tuple(layers), depth, len(seen), False)
