"""Bad input gets one clear line naming the place, exit status 2, and nothing written.

Each case is a data file under fixtures/cases/bad_input/.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from race.cli.main import main
from tests.conftest import FIXTURES, ROOT

CASES = sorted((FIXTURES / "cases" / "bad_input").glob("*.json"))


def _plan_bytes(case: dict[str, Any]) -> bytes | None:
    """The plan file of a case: given as text, JSON, base64 bytes, a patch of a fixture plan's
    first obligation, or generated (too large or too deep to keep as a file)."""
    if case.get("plan_text") is not None:
        return str(case["plan_text"]).encode()
    if case.get("plan") is not None:
        return json.dumps(case["plan"]).encode()
    if "plan_b64" in case:
        return base64.b64decode(case["plan_b64"])
    if "obligation_patch" in case:
        plan = json.loads((FIXTURES / "plans" / case.get("plan_from", "cascade_lexical.json")).read_text())
        plan["obligations"][0].update(case["obligation_patch"])
        return json.dumps(plan).encode()
    generate = case.get("plan_generate")
    if generate is None:
        return None
    if generate["kind"] == "nesting":
        return b"[" * generate["depth"] + b"]" * generate["depth"]
    if generate["kind"] == "big_int":
        plan = json.loads((FIXTURES / "plans" / "cascade_lexical.json").read_text())
        return json.dumps(plan).replace('"k": 3', '"k": ' + "9" * generate["digits"]).encode()
    assert generate["kind"] == "refine_chain", generate
    return json.dumps(refine_chain(generate["depth"])).encode()


def refine_chain(depth: int) -> dict[str, Any]:
    """A legal plan: one lexical obligation under ``depth`` refines, each over the last."""
    operators = [
        {"id": f"r{i}", "op": "refine", "input": "o" if i == 0 else f"r{i - 1}", "order_by": "date_desc"}
        for i in range(depth)
    ]
    return {
        "schema_version": "race.plan/1",
        "root": f"r{depth - 1}",
        "obligations": [{"id": "o", "kind": "seek_support", "query": {"text": "raft"}, "query_class": "lexical"}],
        "operators": operators,
        "budget": {"max_nodes": 4096},
    }


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("case_path", CASES, ids=[p.stem for p in CASES])
def test_bad_input_fails_closed(
    case_path: Path, tmp_path: Path, index_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case: dict[str, Any] = json.loads(case_path.read_text())
    plan_file = tmp_path / "plan.json"
    plan_bytes = _plan_bytes(case)
    if plan_bytes is not None:
        plan_file.write_bytes(plan_bytes)
    index = tmp_path / "no-such-index" if case.get("index") == "missing" else index_dir
    if case["command"] == "rsc-validate":
        if "rsc_b64" in case:
            (tmp_path / "rsc.json").write_bytes(base64.b64decode(case["rsc_b64"]))
        else:
            rsc = case.get("rsc")
            if "rsc_from" in case:
                rsc = json.loads((ROOT / case["rsc_from"]).read_text()) | case["rsc_patch"]
            (tmp_path / "rsc.json").write_text(case["rsc_text"] if "rsc_text" in case else json.dumps(rsc))
        argv = ["rsc", "validate", str(tmp_path / "rsc.json")]
    elif case["command"] == "argv":
        # Any command line; {plan}, {index} and {stats} stand for the case's files and the index.
        stats_file = tmp_path / "stats.json"
        if "stats_b64" in case:
            stats_file.write_bytes(base64.b64decode(case["stats_b64"]))
        elif "stats_text" in case:
            stats_file.write_text(case["stats_text"])
        places = {"{plan}": str(plan_file), "{index}": str(index), "{stats}": str(stats_file)}
        argv = [places.get(a, a) for a in case["argv"]]
    elif case["command"] == "plan":
        argv = ["plan", str(plan_file), "--explain", "--json", "--index", str(index)]
    else:
        argv = ["run", str(plan_file), "--json", "--index", str(index)]
    before = _files(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exit_:  # a usage error, reported by the argument parser
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("race: error: "), err
    for fragment in case["expect"]:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    for fragment in case.get("expect_not", ()):
        assert fragment not in err, f"{fragment!r} in {err!r}"
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
