"""Sharding: an adapter over shards with a scatter-gather top-k merge, its scan, and shards
held by Ray actors."""
