"""Bad corpora: ``race index`` gives one line naming the file (and line, and field), exit 2, and
leaves nothing in ``--out`` nor beside it.

Each case is a data file under fixtures/cases/bad_input/corpus/: the corpus's files (text, or
base64 bytes), the schema it is indexed under, and what cannot be kept as a file — a 50 MB
document, a symlink loop, a directory where a file belongs — as a recipe run here.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.ingest.files import MAX_DOCUMENT_BYTES
from race.cli.main import main
from tests.conftest import FIXTURES, ROOT

CASES = sorted((FIXTURES / "cases" / "bad_input" / "corpus").glob("*.json"))


def make_corpus(case: dict[str, Any], root: Path) -> Path:
    """Write the case's corpus under ``root`` and return the path to index."""
    root.mkdir(parents=True)
    schema = ROOT / case["schema_from"]
    shutil.copy(schema, root / case.get("schema_name", f"schema{schema.suffix}"))
    for name, text in case.get("files", {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    for name, data in case.get("files_b64", {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(base64.b64decode(data))
    for step in case.get("generate", []):
        path = root / step["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        if step["kind"] == "symlink":
            path.symlink_to(step["target"])
            continue
        if step["kind"] == "directory":
            (path / "part-0.jsonl").parent.mkdir(parents=True)
            (path / "part-0.jsonl").write_text("{}\n")
            continue
        assert step["kind"] == "repeat", step
        unit = step["unit"].encode()
        with path.open("ab" if step.get("append") else "wb") as out:
            out.write(step["head"].encode())
            written = len(step["head"].encode()) + len(step.get("tail", "").encode())
            block = unit * max(1, (1 << 16) // len(unit))
            while written + len(block) <= step["bytes"]:
                out.write(block)
                written += len(block)
            out.write(b"x" * (step["bytes"] - written))
            out.write(step.get("tail", "").encode())
        if not step.get("append"):
            assert path.stat().st_size == step["bytes"]
    return root / str(case.get("corpus", ""))


@pytest.mark.parametrize("case_path", CASES, ids=[p.stem for p in CASES])
def test_bad_corpus_fails_closed(case_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case: dict[str, Any] = json.loads(case_path.read_text())
    corpus = make_corpus(case, tmp_path / "corpus")
    out = tmp_path / "out"
    code = main(["index", str(corpus), "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 2
    assert stdout == ""
    assert err.count("\n") == 1 and err.startswith("race: error: "), err
    for fragment in case["expect"]:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_bad_corpus_leaves_an_existing_index_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case: dict[str, Any] = json.loads((FIXTURES / "cases" / "bad_input" / "corpus" / "invalid_date.json").read_text())
    corpus = make_corpus(case, tmp_path / "corpus")
    out = tmp_path / "out"
    out.mkdir()
    (out / "race-index.json").write_text('{"schema_version": "race.index/1"}\n')
    for update in ([], ["--update"]):
        assert main(["index", str(corpus), "--out", str(out), *update]) == 2
    capsys.readouterr()
    assert [p.name for p in out.iterdir()] == ["race-index.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "out"]


def test_a_50mb_document_is_skipped_or_refused_in_little_memory(tmp_path: Path) -> None:
    """Peak RSS (VmHWM) of ``race index`` on a corpus holding a 50 MB document (a folder file, then a
    JSONL line), measured in a child process: skipping or refusing it must not read the
    document whole into anything bigger than itself."""
    peaks = {}
    # A folder's 50 MB file is skipped (too large) without being read; a JSONL line is refused.
    for name, folder, status in (("size_50mb", "skipped_files", 0), ("size_50mb_jsonl", "bad_input/corpus", 2)):
        case = json.loads((FIXTURES / "cases" / folder / f"{name}.json").read_text())
        corpus = make_corpus(case, tmp_path / name)
        script = (
            "import sys\n"
            "from race.cli.main import main\n"
            "code = main(['index', sys.argv[1], '--out', sys.argv[2]])\n"
            "status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
            "print(int(status.split()[0]))\n"
            "sys.exit(code)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(corpus), str(tmp_path / f"{name}-out")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == status, done.stderr
        peaks[name] = int(done.stdout.strip().splitlines()[-1]) * 1024
        assert (tmp_path / f"{name}-out").exists() == (status == 0)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent.
    print(f"peak RSS of race index: {peaks}")
    # The JSONL line is read up to the limit, once; the folder file not at all.
    for peak in peaks.values():
        assert peak < 600 * 1024 * 1024 + 4 * MAX_DOCUMENT_BYTES
