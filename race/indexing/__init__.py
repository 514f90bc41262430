"""Indexing and instances: building and updating an index (locally or distributed), the
bundled index, the catalog of attached instances and its contracts, attaching Milvus,
opening the instances an engine reads, and their calibrations."""
