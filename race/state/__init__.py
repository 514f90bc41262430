"""State that outlives one run: the plan, result and receipt caches, snapshot pinning,
retention of backend responses, and replay of a retained receipt."""
