"""Bad input gets one clear line naming the place, exit status 2, and nothing written.

Each case is a data file under fixtures/cases/bad_input/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from race.cli import main
from tests.conftest import FIXTURES, ROOT

CASES = sorted((FIXTURES / "cases" / "bad_input").glob("*.json"))


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("case_path", CASES, ids=[p.stem for p in CASES])
def test_bad_input_fails_closed(
    case_path: Path, tmp_path: Path, index_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case: dict[str, Any] = json.loads(case_path.read_text())
    plan_file = tmp_path / "plan.json"
    if case.get("plan_text") is not None:
        plan_file.write_text(case["plan_text"])
    elif case.get("plan") is not None:
        plan_file.write_text(json.dumps(case["plan"]))
    index = tmp_path / "no-such-index" if case.get("index") == "missing" else index_dir
    if case["command"] == "rsc-validate":
        rsc = case.get("rsc")
        if "rsc_from" in case:
            rsc = json.loads((ROOT / case["rsc_from"]).read_text()) | case["rsc_patch"]
        (tmp_path / "rsc.json").write_text(json.dumps(rsc))
        argv = ["rsc", "validate", str(tmp_path / "rsc.json")]
    elif case["command"] == "plan":
        argv = ["plan", str(plan_file), "--explain", "--json", "--index", str(index)]
    else:
        argv = ["run", str(plan_file), "--json", "--index", str(index)]
    before = _files(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("race: error: "), err
    for fragment in case["expect"]:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    assert _files(tmp_path) == before


def test_index_of_missing_corpus_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["index", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2 and "nope" in err and "no such corpus" in err
    assert not (tmp_path / "out").exists()


def test_index_of_corpus_with_bad_front_matter_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("---\nid: a\ntitle: fine\n---\n# A\n\n## One\ntext\n")
    (corpus / "b.md").write_text("---\nid: b\nthis line has no colon\n---\n# B\n")
    code = main(["index", str(corpus), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2 and "b.md" in err and "line 3" in err
    assert not (tmp_path / "out").exists()
    assert not any(p.name.startswith(".out.building") for p in tmp_path.iterdir())
