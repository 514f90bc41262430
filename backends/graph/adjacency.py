"""The graph as an index opens it: plain adjacency dicts laid out as networkx's MultiDiGraph.

Reading ``graph.json`` and answering scans needs no networkx (whose import costs more than
the rest of a lexical ``race run``): ``Adjacency`` keeps the same structures networkx does
(``_node``, ``_succ``, ``_pred``: node -> neighbour -> relation key -> edge attributes, each in
insertion order) and the few read methods the adapter, ``store.content`` and the walk use,
with networkx's iteration order. ``as_networkx`` gives the MultiDiGraph for callers that want
one (``GraphAdapter.graph``, an in-place update), node for node and edge for edge in the same
insertion order, so that it is the graph ``read_graph`` used to build.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Attrs = dict[str, Any]


class NodeView:
    """``graph.nodes``: subscript for a node's attributes, call for ``(node, attrs)`` pairs."""

    __slots__ = ("_node",)

    def __init__(self, node: dict[str, Attrs]) -> None:
        self._node = node

    def __getitem__(self, node: str) -> Attrs:
        return self._node[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, node: object) -> bool:
        return node in self._node

    def __call__(self, data: bool = False) -> Any:
        return iter(self._node.items()) if data else iter(self._node)


class Adjacency:
    """A directed multigraph keyed by relation, read-only once built (see the module doc)."""

    def __init__(self) -> None:
        self.graph: Attrs = {}
        self._node: dict[str, Attrs] = {}
        self._succ: dict[str, dict[str, dict[str, Attrs]]] = {}
        self._pred: dict[str, dict[str, dict[str, Attrs]]] = {}
        self._order: list[tuple[str, str, str, Attrs]] = []
        """Every edge in the order it was added: what ``as_networkx`` replays."""

    @property
    def nodes(self) -> NodeView:
        return NodeView(self._node)

    def __contains__(self, node: object) -> bool:
        return node in self._node

    def __iter__(self) -> Iterator[str]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def add_node(self, node: str, **attrs: Any) -> None:
        if node not in self._node:
            self._node[node] = {}
            self._succ[node] = {}
            self._pred[node] = {}
        self._node[node].update(attrs)

    def add_edge(self, src: str, dst: str, key: str, **attrs: Any) -> None:
        for end in (src, dst):
            if end not in self._node:
                self.add_node(end)
        keyed = self._succ[src].setdefault(dst, {})
        if key in keyed:
            keyed[key].update(attrs)
            return
        data = dict(attrs)
        keyed[key] = data
        self._pred[dst].setdefault(src, {})[key] = data
        self._order.append((src, dst, key, data))

    def number_of_nodes(self) -> int:
        return len(self._node)

    def number_of_edges(self) -> int:
        return len(self._order)

    def edges(self, keys: bool = False, data: bool = False) -> Iterator[tuple[Any, ...]]:
        """Each edge as networkx lists it: by source node, then neighbour, then key."""
        for src, adjacent in self._succ.items():
            for dst, keyed in adjacent.items():
                for key, attrs in keyed.items():
                    row: tuple[Any, ...] = (src, dst, key) if keys else (src, dst)
                    yield (*row, attrs) if data else row


def as_networkx(graph: Any) -> Any:
    """``graph`` as a networkx MultiDiGraph (itself when it is one already)."""
    if not isinstance(graph, Adjacency):
        return graph
    import networkx as nx

    copy = nx.MultiDiGraph()
    copy.graph.update(graph.graph)
    for node, attrs in graph._node.items():
        copy.add_node(node, **attrs)
    copy.add_edges_from((src, dst, key, dict(attrs)) for src, dst, key, attrs in graph._order)
    return copy
