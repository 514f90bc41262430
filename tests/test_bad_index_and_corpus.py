"""Bad input that lives in a corpus or an index directory: one line naming the place, exit
status 2, nothing written: corpus files that are not UTF-8, and index files (the index
manifest, tantivy's meta.json, the backends' own manifests) that are truncated, not UTF-8,
too deep, or garbage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from race.cli.main import main
from tests.conftest import FIXTURES

PLAN = str(FIXTURES / "plans" / "cascade_lexical.json")


def _one_error_line(capsys: pytest.CaptureFixture[str], code: int, *fragments: str) -> None:
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("race: error: "), err
    for fragment in fragments:
        assert fragment in err, err


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("a.md", b"---\nid: a\ntitle: caf\xe9\n---\n# A\n\n## One\ntext\n"),
        ("b.txt", b"\xff\xfeplain text in UTF-16"),
    ],
)
def test_corpus_file_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: bytes) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / name).write_bytes(data)
    code = main(["index", str(corpus), "--out", str(tmp_path / "out")])
    _one_error_line(capsys, code, name, "UTF-8")
    assert not (tmp_path / "out").exists()


def test_jsonl_corpus_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_bytes(b'{"id": "x", "text": "caf\xe9"}\n')
    code = main(["index", str(docs), "--out", str(tmp_path / "out")])
    _one_error_line(capsys, code, "docs.jsonl", "UTF-8")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def index_copy(index_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    return copy


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


TRUNCATED = object()
"""Stands for the file's own first 40 bytes."""


@pytest.mark.parametrize(
    ("name", "data", "fragments"),
    [
        ("race-index.json", TRUNCATED, ("race-index.json", "malformed JSON")),
        ("race-index.json", b'{"schema_version": "\xff"}', ("race-index.json", "not UTF-8: byte 0xff")),
        ("race-index.json", b"[" * 5000 + b"]" * 5000, ("race-index.json", "nested deeper")),
        ("race-index.json", b'{"schema_version": 1' + b"0" * 5000 + b"}", ("race-index.json", "digits")),
        ("tantivy/meta.json", b"\x00garbage{", ("tantivy/meta.json", "tantivy cannot open it", "race index")),
        ("tantivy/meta.json", b"{}\n\n{", ("tantivy/meta.json", "tantivy cannot open it")),
        ("tantivy/race.json", TRUNCATED, ("tantivy/race.json", "malformed JSON")),
        ("tantivy/race.json", b"\xfe\xff", ("tantivy/race.json", "not UTF-8")),
        ("lancedb/race.json", TRUNCATED, ("lancedb/race.json", "malformed JSON")),
        ("lancedb/calibration.json", TRUNCATED, ("lancedb/calibration.json", "malformed JSON")),
        ("lancedb/calibration.json", b'{"generation": 3}', ("lancedb/calibration.json", "race calibrate")),
        ("lancedb/calibration.json", b'{"generation": "g", "calibrations": [{}]}', ("lancedb/calibration.json",)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_index_file(
    index_copy: Path,
    tmp_cwd: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    data: object,
    fragments: tuple[str, ...],
) -> None:
    target = index_copy / name
    target.write_bytes(target.read_bytes()[:40] if data is TRUNCATED else data)  # type: ignore[arg-type]
    before = _tree(index_copy)
    for command in (["plan", PLAN, "--index", str(index_copy)], ["run", PLAN, "--index", str(index_copy)]):
        code = main(command)
        _one_error_line(capsys, code, *fragments)
    # Nothing written: the index is as it was and the working directory stays empty.
    assert _tree(index_copy) == before
    assert [p.name for p in tmp_cwd.iterdir()] == ["index"]
