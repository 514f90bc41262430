"""Each package's __init__ re-exports its public names, and only those."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["rsc", "planner", "backends", "race"])
def test_all_names_exist_and_are_sorted(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    # Constants, then classes, then functions, each alphabetical (ruff's RUF022 order).
    assert names == sorted(names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
    assert len(set(names)) == len(names)
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == []


def test_race_public_face() -> None:
    import race

    assert {"Engine", "Receipt", "ensure_bundled_index"} <= set(race.__all__)
