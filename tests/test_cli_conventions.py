"""The command line behaves as scripts expect: `-` reads standard input, `--json` on every
command that prints data, no progress bars when nobody watches a terminal."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from race.cli.main import main
from tests.conftest import FIXTURES, ROOT

PLAN = FIXTURES / "plans" / "cascade_lexical.json"


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", SimpleNamespace(buffer=io.BytesIO(data)))


def test_plan_from_stdin_is_the_plan_from_its_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], index_dir: Path
) -> None:
    assert main(["plan", str(PLAN), "--json", "--index", str(index_dir)]) == 0
    from_file = capsys.readouterr().out
    _stdin(monkeypatch, PLAN.read_bytes())
    assert main(["plan", "-", "--json", "--index", str(index_dir)]) == 0
    assert capsys.readouterr().out == from_file


def test_bad_plan_on_stdin_names_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], index_dir: Path
) -> None:
    _stdin(monkeypatch, b"{")
    assert main(["run", "-", "--index", str(index_dir)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("race: error: <stdin>: malformed JSON") and err.count("\n") == 1


def test_rsc_validate_reads_stdin_and_prints_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rsc = ROOT / "backends" / "tantivy" / "rsc" / "tantivy.bm25.json"
    _stdin(monkeypatch, rsc.read_bytes())
    assert main(["rsc", "validate", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rsc_id"] == "tantivy.bm25"


def test_rsc_list_json_is_every_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rsc", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert main(["rsc", "list", "--json"]) == 0
    contracts = json.loads(capsys.readouterr().out)
    assert [f"{c['rsc_id']}@{c['version']}" for c in contracts] == [line.split()[0] for line in lines]


def test_index_json_and_no_progress_bar_off_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("---\nid: a\ntitle: A\n---\n# A\n\n## One\nraft replication text\n")
    assert main(["index", str(corpus), "--out", str(tmp_path / "out"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert set(json.loads(out)) >= {"tantivy", "graph"}
    assert "chunk/s" not in err and "\r" not in err  # stderr here is a capture, not a terminal
