"""No implicit corpus: a command that reads an index is told which one (``--index``,
``$RACE_INDEX``, or ``--index bundled`` for the demo corpus); forgetting is one line naming the
flag and exit 2, never an answer from the demo corpus."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

PLAN = str(FIXTURES / "plans" / "cascade_lexical.json")


def _race(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "race", *args], capture_output=True, text=True, env=env, timeout=600)


def _without_index() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RACE_INDEX"}


@pytest.mark.parametrize(
    "args",
    [("run", PLAN), ("plan", PLAN), ("batch", PLAN, "--out", "never-written.jsonl")],
    ids=["run", "plan", "batch"],
)
def test_a_forgotten_index_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    done = _race(*args, env=_without_index())
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--index" in lines[0] and "RACE_INDEX" in lines[0], lines
    assert done.stdout == ""
    assert not Path("never-written.jsonl").exists()


def test_the_index_comes_from_the_flag_or_the_environment(index_dir: Path) -> None:
    by_flag = _race("run", PLAN, "--index", str(index_dir), "--json", env=_without_index())
    by_env = _race("run", PLAN, "--json", env={**_without_index(), "RACE_INDEX": str(index_dir)})
    assert by_flag.returncode == by_env.returncode == 0, by_flag.stderr + by_env.stderr
    assert by_flag.stdout and '"receipt_cache"' in by_flag.stdout


def test_the_demo_corpus_is_asked_for_by_name() -> None:
    done = _race("plan", PLAN, "--index", "bundled", env=_without_index())
    assert done.returncode == 0, done.stderr
