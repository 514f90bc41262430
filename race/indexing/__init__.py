"""Indexing and instances: building and updating an index (locally, or embedding on Ray), the
bundled index, calibration, the catalog of instances and its contract overrides, attaching
Milvus, and opening the instances an engine reads."""
