"""Benchmarks: each writes its figures to ``benchmarks/results/NAME.{json,md}``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def write_results(name: str, results: dict[str, Any], table: str) -> None:
    """``results`` as ``RESULTS/name.json`` and its markdown ``table`` as ``name.md``, and the table printed."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (RESULTS / f"{name}.md").write_text(table)
    print(table)
