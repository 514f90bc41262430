"""tantivy (BM25, exact keyword and range prefilters, exact identifier lookups)."""

from backends.tantivy.adapter import TantivyAdapter

__all__ = ["TantivyAdapter"]
