"""The import contracts in pyproject.toml ([tool.importlinter]: race -> (planner | backends) ->
rsc, race's stages and backends' layers, no cycle between siblings) hold for this tree, and each
breaks on a planted back-import, checked in a copy of the packages so that nothing here changes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("race", "rsc", "planner", "backends")
TOP = "race above planner and backends, both above rsc"
STAGES = "race by stage"
BACKENDS = "backends: adapters above the shared backend code"
ACYCLIC = "no import cycles between sibling modules or packages"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root`` with ``root``'s pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", command, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def broken(output: str) -> set[str]:
    """The contracts the report's summary names as broken, by the start of their names."""
    summary = " ".join(output.split("dependencies.", 1)[-1].split("Contracts:", 1)[0].split())
    verdicts = re.findall(r"-* ?(.+?) (KEPT|BROKEN)", summary)
    names = (TOP, STAGES, BACKENDS, ACYCLIC)
    return {n for name, verdict in verdicts if verdict == "BROKEN" for n in names if name.startswith(n)}


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_contracts_hold() -> None:
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert broken(run.stdout) == set()
    assert "4 kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "line", "contracts"),
    [
        # rsc is the bottom layer: it imports none of the others.
        ("rsc/planted.py", "from race.engine import Engine", {TOP}),
        # the planner sees a backend only as RSC data.
        ("planner/planted.py", "import backends.lancedb", {TOP}),
        # a stage never reaches up to the engine that runs it.
        ("race/run/planted.py", "from race.engine import Engine", {STAGES, ACYCLIC}),
        # ingestion is below the adapters that read it.
        ("backends/ingest/planted.py", "from backends.tantivy import TantivyAdapter", {BACKENDS, ACYCLIC}),
        # a cycle between two modules of one package, lazily imported.
        ("race/run/outcome.py", "def planted() -> None:\n    from race.run import executor", {ACYCLIC}),
    ],
)
def test_a_planted_back_import_breaks_its_contract(copied: Path, module: str, line: str, contracts: set[str]) -> None:
    path = copied / module
    before = path.read_text() if path.exists() else None
    path.write_text((before or "") + "\n\n" + line + "\n")
    try:
        run = lint_imports(copied)
    finally:
        if before is None:
            path.unlink()
        else:
            path.write_text(before)
    assert run.returncode == 1, run.stdout + run.stderr
    assert broken(run.stdout) == contracts, run.stdout
