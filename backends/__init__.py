"""Backend adapters, one package per backend, each with its RSC files beside it; ingestion
(``backends.ingest``), embedding models (``backends.models``) and sharding (``backends.sharding``)
in packages of their own, which the adapters import and which import no adapter."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Nothing is printed unless the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from backends.base import Adapter, Progress, blocking, custody_hit, load_contracts_beside
    from backends.graph import GraphAdapter
    from backends.ingest.corpus import METADATA_FIELDS, Chunk, Corpus, Edge, load_corpus
    from backends.lancedb import LanceAdapter, LanceIndex
    from backends.remote import RemoteAdapter
    from backends.tantivy import TantivyAdapter
    from rsc import Contract

    LOCAL_ADAPTERS: tuple[type[Adapter], ...]
    """Adapters that `race index` builds and an engine opens from an index directory, in build order."""

# Each adapter module imports its backend's client library (LanceDB and pyarrow take a
# second or more), so an adapter class is imported on first use, not with this package; the
# shared code (pydantic records) too, so that ``race --help`` and the server's wire vocabulary
# (``backends.remote.wire``) load neither.
_ADAPTERS = {
    "Adapter": "backends.base",
    "Progress": "backends.base",
    "blocking": "backends.base",
    "custody_hit": "backends.base",
    "load_contracts_beside": "backends.base",
    "METADATA_FIELDS": "backends.ingest.corpus",
    "Chunk": "backends.ingest.corpus",
    "Corpus": "backends.ingest.corpus",
    "Edge": "backends.ingest.corpus",
    "load_corpus": "backends.ingest.corpus",
    "GraphAdapter": "backends.graph",
    "LanceAdapter": "backends.lancedb",
    "LanceIndex": "backends.lancedb",
    "RemoteAdapter": "backends.remote",
    "TantivyAdapter": "backends.tantivy",
}
# LanceDB's is the handle that plans from the index's files and opens the table on first need.
_LOCAL = ("TantivyAdapter", "LanceIndex", "GraphAdapter")
# The backend package of each local adapter, in build order, and of the remote one.
_LOCAL_PACKAGES = ("tantivy", "lancedb", "graph")


def __getattr__(name: str) -> Any:
    if name == "LOCAL_ADAPTERS":
        value: Any = tuple(getattr(importlib.import_module(_ADAPTERS[a]), a) for a in _LOCAL)
    elif name in _ADAPTERS:
        value = getattr(importlib.import_module(_ADAPTERS[name]), name)
    else:
        raise AttributeError(f"module 'backends' has no attribute {name!r}")
    globals()[name] = value
    return value


def shipped_contracts(*, remote: bool = False) -> tuple[Contract, ...]:
    """The RSC files shipped beside the local adapters (and, with ``remote``, the remote
    adapter's), read without importing any adapter, sorted by id and version; the same
    contracts as the adapters' own ``contracts()`` (tests/test_startup.py checks)."""
    from backends.base import load_contracts_beside

    packages = (*_LOCAL_PACKAGES, "remote") if remote else _LOCAL_PACKAGES
    here = Path(__file__).parent
    found = [c for p in packages for c in load_contracts_beside(str(here / p / "__init__.py"))]
    return tuple(sorted(found, key=lambda c: (c.rsc_id, c.version)))


__all__ = [
    "LOCAL_ADAPTERS",
    "METADATA_FIELDS",
    "Adapter",
    "Chunk",
    "Corpus",
    "Edge",
    "GraphAdapter",
    "LanceAdapter",
    "LanceIndex",
    "Progress",
    "RemoteAdapter",
    "TantivyAdapter",
    "blocking",
    "custody_hit",
    "load_contracts_beside",
    "load_corpus",
    "shipped_contracts",
]
