"""``race index --update`` on a disk that cannot take the copy, and after a killed build: a
full disk is one short line naming the index and the cause, with the partial
``.NAME.building-PID`` copy removed and the index as it was; an index a killed build had moved
aside (``.NAME.previous-PID``) is put back and updated, not built again whole."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from race.cli.main import main
from race.indexing.staging import disk_error
from tests.test_indexing_killed import _corpus

EDITED = "changelog/kestrel-3-4-0.md"


def _files(out: Path) -> dict[Path, bytes]:
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _edit(corpus: Path) -> None:
    doc = corpus / "docs" / EDITED
    doc.write_text(doc.read_text().replace("Kestrel", "Kestrel broker", 1))


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


@pytest.fixture
def lexical(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    corpus = _corpus(tmp_path / "corpus")
    out = tmp_path / "idx"
    assert main(["index", str(corpus), "--out", str(out), "--no-vectors"]) == 0
    capsys.readouterr()
    _edit(corpus)
    return corpus, out


def test_a_full_disk_during_the_copy_is_one_line_and_leaves_no_copy(
    lexical: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, out = lexical
    before = _files(out)
    copied: list[str] = []
    real_copy = shutil.copy2

    def fill_up(src: str, dst: str, **kwargs: object) -> object:
        if len(copied) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", dst)
        copied.append(dst)
        return real_copy(src, dst)

    monkeypatch.setattr(shutil, "copy2", fill_up)
    code = main(["index", str(corpus), "--out", str(out), "--no-vectors", "--update"])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.count("\n") == 1 and err.startswith(f"race: error: {out}: cannot copy the index to update it: "), err
    assert "No space left on device (ENOSPC) writing " in err and "removed the partial index " in err
    assert len(err) < 300 + 2 * len(str(out))
    assert len(copied) == 3  # the copy stops at the first refusal, not after trying every file
    assert _leftovers(out) == []
    assert _files(out) == before


def test_copytree_error_lists_become_one_short_line(tmp_path: Path) -> None:
    """shutil.copytree reports every file it failed on in one exception; the line keeps the first."""
    out, staging = tmp_path / "idx", tmp_path / ".idx.building-1"
    reasons = [(f"{out}/f{i}", f"{staging}/f{i}", "[Errno 28] No space left on device") for i in range(900)]
    error = disk_error(shutil.Error(reasons), out, staging, "copy the index to update it")
    assert error is not None
    assert str(error).startswith(f"{out}: cannot copy the index to update it: [Errno 28] No space left on device")
    assert "(900 files failed)" in str(error) and len(str(error)) < 300


def test_other_errors_are_not_disk_errors(tmp_path: Path) -> None:
    assert disk_error(ValueError("x"), tmp_path, tmp_path, "build the index") is None
    assert disk_error(OSError(errno.ENOENT, "gone"), tmp_path, tmp_path, "build the index") is None
    full = disk_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "i", tmp_path, "update the index")
    assert full is not None and "cannot update the index: No space left on device (ENOSPC)" in str(full)


def test_update_after_a_killed_swap_restores_the_index_then_updates(
    lexical: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed between moving the old index aside and moving the new one in (``--out`` absent,
    ``.idx.previous-PID`` and ``.idx.building-PID`` beside it): the next ``--update`` puts the
    old index back and updates the one edited document."""
    corpus, out = lexical
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    out.rename(out.with_name(f".{out.name}.previous-{pid}"))
    (out.with_name(f".{out.name}.building-{pid}") / "tantivy").mkdir(parents=True)
    assert main(["index", str(corpus), "--out", str(out), "--no-vectors", "--update"]) == 0
    _, err = capsys.readouterr()
    assert f"put back the index a killed build had moved aside (.{out.name}.previous-{pid})" in err
    assert "building the index whole" not in err
    assert "updated: 0 added, 1 changed, 0 removed, 2 unchanged; re-indexed 1 document" in err
    assert _leftovers(out) == []
    assert (out / "race-index.json").is_file()


_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
from race.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
"""``race index`` in a process that may write no file past 64 KiB: every write beyond it is
refused with EFBIG, as a full disk refuses with ENOSPC, and tantivy meets it first."""


def test_a_build_the_disk_refuses_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "corpus", corpus)
    out = tmp_path / "idx"
    run = subprocess.run(
        [sys.executable, "-c", _LIMITED, "index", str(corpus), "--out", str(out), "--no-vectors"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1, run.stderr
    last = run.stderr.splitlines()[-1]
    assert last.startswith(f"race: error: {out}: cannot build the index: "), run.stderr
    assert "internal error" not in run.stderr and "removed the partial index" in last
    assert not out.exists() and _leftovers(out) == []


@pytest.mark.parametrize(
    ("message", "expect"),
    [
        ("An IO error occurred: 'No space left on device (os error 28)'", "No space left on device (ENOSPC)"),
        ("Internal error: 'File too large (os error 27)'", "File too large (EFBIG)"),
        (
            "An error occurred in a thread: 'An index writer was killed.. A worker thread encountered an error "
            "(io::Error most likely) or panicked.'",
            "the tantivy index writer stopped on an I/O error (",
        ),
        (
            "lance error: LanceError(IO): No space left on device (os error 28), "
            "/root/.cargo/registry/src/…/lance-file-13.0.0/src/writer/structural.rs:258:9",
            "No space left on device (ENOSPC); removed",
        ),
        ("Opening '/x/meta.json' failed (os error 2); then No space left on device (os error 28)", "(ENOSPC)"),
    ],
    ids=["enospc", "efbig", "writer_killed", "lancedb", "second_errno"],
)
def test_tantivy_s_and_lance_s_refusals_of_a_write_are_disk_errors(message: str, expect: str, tmp_path: Path) -> None:
    kind = RuntimeError if message.startswith("lance") else ValueError
    error = disk_error(kind(message), tmp_path / "i", tmp_path / ".i.building-1", "build the index")
    assert error is not None and expect in str(error), error


@pytest.mark.parametrize(
    "message",
    ["Opening '/x/meta.json' failed (os error 2)", "Schema error: field 'x' has no io::Error conversion"],
    ids=["not_found", "not_a_writer"],
)
def test_other_library_errors_are_not_disk_errors(message: str, tmp_path: Path) -> None:
    assert disk_error(ValueError(message), tmp_path / "i", tmp_path / ".i.building-1", "build the index") is None
