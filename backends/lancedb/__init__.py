"""LanceDB (cosine vector search: exact flat, ANN with prefilter, ANN with postfilter).

``LanceIndex`` opens an index for planning without importing LanceDB or pyarrow;
``LanceAdapter`` (imported on first use) is the adapter over the table itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.lancedb.handle import LanceIndex

if TYPE_CHECKING:
    from backends.lancedb.adapter import LanceAdapter


def __getattr__(name: str) -> Any:
    if name == "LanceAdapter":
        from backends.lancedb.adapter import LanceAdapter

        return LanceAdapter
    raise AttributeError(f"module 'backends.lancedb' has no attribute {name!r}")


__all__ = ["LanceAdapter", "LanceIndex"]
