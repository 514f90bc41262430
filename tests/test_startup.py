"""Commands that need no backend start without importing one: `race --help`, `race rsc …`
and `race schema …` never load LanceDB, pyarrow, networkx, tantivy or the model's runtime."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backends import LOCAL_ADAPTERS, RemoteAdapter, shipped_contracts

HEAVY = ("lancedb", "pyarrow", "networkx", "tantivy", "tokenizers", "safetensors")

# Runs one command in a fresh interpreter and prints which heavy modules it imported.
_PROBE = """
import contextlib, io, json, sys
from race.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(json.loads(sys.argv[1]))
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["rsc", "list"], ["rsc", "show", "tantivy.bm25"], ["schema", "plan"]],
    ids=lambda a: " ".join(a),
)
def test_command_imports_no_backend(argv: list[str]) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(probe.stdout) == []


def test_shipped_contracts_are_the_adapters_own() -> None:
    from_adapters = sorted(
        (c for a in (*LOCAL_ADAPTERS, RemoteAdapter) for c in a.contracts()), key=lambda c: (c.rsc_id, c.version)
    )
    assert shipped_contracts(remote=True) == tuple(from_adapters)
