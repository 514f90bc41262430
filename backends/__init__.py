"""Backend adapters, one package per backend, each with its RSC files beside it."""

from backends.base import Adapter, Progress, blocking, custody_hit, load_contracts_beside
from backends.corpus import METADATA_FIELDS, Chunk, Corpus, Edge, load_corpus
from backends.graph import GraphAdapter
from backends.lancedb import LanceAdapter
from backends.remote import RemoteAdapter
from backends.tantivy import TantivyAdapter

LOCAL_ADAPTERS: tuple[type[Adapter], ...] = (TantivyAdapter, LanceAdapter, GraphAdapter)
"""Adapters that `race index` builds and an engine opens from an index directory, in build order."""

__all__ = [
    "LOCAL_ADAPTERS",
    "METADATA_FIELDS",
    "Adapter",
    "Chunk",
    "Corpus",
    "Edge",
    "GraphAdapter",
    "LanceAdapter",
    "Progress",
    "RemoteAdapter",
    "TantivyAdapter",
    "blocking",
    "custody_hit",
    "load_contracts_beside",
    "load_corpus",
]
