"""State that outlives one run: the plan, result and receipt caches, snapshot pinning,
retention of backend responses, replay of a retained receipt, and learned statistics (what
runs measured, per scan, fed back to the cost model)."""
