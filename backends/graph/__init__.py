"""networkx graph backend: exact identity, neighbour and bounded k-hop answers over documents,
entities and typed edges, plus the source-dependence lineage the runtime counts origins by."""

from backends.graph.adapter import GraphAdapter

__all__ = ["GraphAdapter"]
