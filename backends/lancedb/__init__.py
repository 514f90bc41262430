"""LanceDB (cosine vector search: exact flat, ANN with prefilter, ANN with postfilter)."""

from backends.lancedb.adapter import LanceAdapter

__all__ = ["LanceAdapter"]
