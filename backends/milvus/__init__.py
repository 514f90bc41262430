"""Milvus (one collection; cosine vector search, exact FLAT or filtered ANN through HNSW/IVF_FLAT).

Importing this package imports ``pymilvus``: only code that uses a Milvus backend does
(the ``race[milvus]`` extra); ``backends`` itself never imports it.
"""

from backends.milvus.adapter import MilvusAdapter

__all__ = ["MilvusAdapter"]
