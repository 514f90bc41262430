"""A ``race index`` killed mid-build (SIGKILL, no handler runs) leaves nothing in ``--out``, and
the next run removes the ``.NAME.building-PID`` it left; a killed ``--update`` leaves the old
index as it was."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from race.indexing.indexing import build_index
from race.indexing.staging import clear_dead_builds
from tests.conftest import FIXTURES, ROOT

DOCS = ("changelog/kestrel-3-4-0.md", "changelog/kestrel-3-5-0.md", "adr/adr-0012-fsync-always-default.md")


def _corpus(root: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    shutil.copy(FIXTURES / "corpus" / "schema.json", root / "schema.json")
    for name in DOCS:
        (root / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / "corpus" / "docs" / name, root / "docs" / name)
    return root


def _kill_while_writing(argv: list[str], out: Path) -> Path:
    """Start ``race`` with ``argv``, SIGKILL it once its staging directory holds a written
    tantivy index and the LanceDB folder exists (it is embedding), and return that directory."""
    script = "import sys; from race.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", script, *argv], cwd=ROOT, stderr=subprocess.PIPE)
    staging = out.with_name(f".{out.name}.building-{proc.pid}")
    deadline = time.monotonic() + 300
    while not ((staging / "tantivy" / "race.json").exists() and (staging / "lancedb").exists()):
        if proc.poll() is not None:
            pytest.fail(f"race index ended before it could be killed: {proc.stderr.read() if proc.stderr else ''!r}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("race index never started writing")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stderr:
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert staging.is_dir()
    return staging


def test_killed_build_leaves_nothing_in_out_and_the_next_run_clears_it(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus")
    out = tmp_path / "idx"
    staging = _kill_while_writing(["index", str(corpus), "--out", str(out)], out)
    assert not out.exists()
    build_index(corpus, out)
    assert not staging.exists()
    assert json.loads((out / "race-index.json").read_text())["documents"] == len(DOCS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "idx"]


def test_killed_update_keeps_the_old_index(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus")
    out = tmp_path / "idx"
    build_index(corpus, out)
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    (corpus / "docs" / DOCS[0]).write_text("# Rewritten\n\n## All of it\n" + "new words " * 400 + "\n")
    staging = _kill_while_writing(["index", str(corpus), "--out", str(out), "--update"], out)
    after = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert after == before
    assert clear_dead_builds(out) == [staging]
    assert not staging.exists()


def test_a_previous_index_moved_aside_by_a_killed_run_is_put_back(tmp_path: Path) -> None:
    """Killed between moving the old index aside and moving the new one in: the old one
    comes back (the half of the swap that ran is undone)."""
    out = tmp_path / "idx"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    aside = tmp_path / f".idx.previous-{pid}"
    aside.mkdir()
    (aside / "race-index.json").write_text("{}")
    staging = tmp_path / f".idx.building-{pid}"
    (staging / "tantivy").mkdir(parents=True)
    live = tmp_path / f".idx.building-{os.getpid()}"
    live.mkdir()
    assert clear_dead_builds(out) == [aside, staging]
    assert (out / "race-index.json").read_text() == "{}"
    assert not staging.exists()
    assert live.exists()  # this process is running: its build is not stale
