"""Backends an engine serves beside an index directory's own: a Milvus collection.

pymilvus is imported only here, and only when a Milvus backend is asked for (the
``race[milvus]`` extra), so ``race`` and ``race --help`` never load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from backends import Adapter
from rsc import InputError


def open_milvus(folders: Sequence[Path]) -> dict[str, Adapter]:
    """The Milvus adapter of at most one instance folder (``MilvusAdapter.build`` wrote it), by
    backend name. Every Milvus contract names the one backend ``milvus``, so an engine serves
    one collection."""
    if not folders:
        return {}
    if len(folders) > 1:
        raise InputError(
            f"{len(folders)} Milvus instances given; the Milvus contracts name one backend 'milvus', so an engine "
            "serves one collection",
            where="--milvus",
        )
    try:
        from backends.milvus import MilvusAdapter
    except ImportError as exc:
        raise InputError(f"a Milvus backend needs the race[milvus] extra ({exc})", where="--milvus") from exc
    return {MilvusAdapter.backend: MilvusAdapter.open(folders[0])}
