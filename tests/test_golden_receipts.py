"""Golden receipts: the normalized receipt of every fixture plan, compared byte for byte.

A receipt names the generation of every backend it read, and a rebuilt index is a new
generation (tantivy segment ids), so the comparison masks the generation strings and the
fingerprints computed over them; everything else — statuses, coverage, gaps, evidence,
custody, fusion provenance — must match exactly. ``RACE_REGOLD=1`` rewrites the files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from race.engine import Engine
from rsc import dumps_canonical
from tests.conftest import FIXTURES

PLANS = sorted(p.name for p in (FIXTURES / "plans").glob("*.json"))
GOLDEN = FIXTURES / "golden" / "receipts"


def masked(receipt: Any) -> bytes:
    """The normalized receipt with generation-dependent strings replaced by placeholders."""
    body = receipt.normalized()
    text = dumps_canonical(body).decode()
    for name, generation in sorted(body["fingerprints"]["backends"].items()):
        text = text.replace(json.dumps(generation), json.dumps(f"<generation:{name}>"))
    data = json.loads(text)
    for field in ("plan", "physical", "evidence"):
        data["fingerprints"][field] = f"<{field}>"
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False).encode() + b"\n"


@pytest.mark.parametrize("name", PLANS)
def test_receipt_matches_golden(index_dir: Path, name: str) -> None:
    receipt = Engine.open(index_dir).run_sync(FIXTURES / "plans" / name)
    got = masked(receipt)
    path = GOLDEN / name.replace(".json", ".receipt.json")
    if os.environ.get("RACE_REGOLD"):
        path.write_bytes(got)
    assert got == path.read_bytes(), f"{name}: normalized receipt differs from {path}"
