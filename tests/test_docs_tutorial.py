"""docs/tutorial.md, run as written: every file it shows is written and every ``$`` command of
its console blocks is run, in order, in a fresh folder whose ``notes/`` holds real markdown
nobody on the project wrote (pip's topic guides as Debian ships them). Each command exits as
the tutorial says (0, or the ``# exits N`` it notes), and what the text claims of the output
is checked against the notes themselves."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

TUTORIAL = ROOT / "docs" / "tutorial.md"
PIP_DOCS = Path("/usr/share/doc/python3-pip/html")
NOTES = sorted([*PIP_DOCS.glob("topics/*.md"), PIP_DOCS / "getting-started.md", PIP_DOCS / "installation.md"])

Step = tuple[str, str, str]
"""("file", name, content) or ("run", command, expected exit status as text)."""


def steps(text: str) -> list[Step]:
    """The tutorial's files and commands, in the order a reader meets them."""
    found: list[Step] = []
    lines = text.splitlines()
    i = 0
    target = None
    while i < len(lines):
        line = lines[i]
        marker = re.fullmatch(r"<!-- file: (\S+) -->", line.strip())
        if marker:
            target = marker.group(1)
        elif line.startswith("```"):
            fence = line[3:].strip()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            body = lines[i + 1 : end]
            if target is not None:
                found.append(("file", target, "\n".join(body) + "\n"))
            elif fence == "console":
                for command in (b[2:] for b in body if b.startswith("$ ")):
                    expected = re.search(r"#\s*exits (\d+)\s*$", command)
                    found.append(("run", command, expected.group(1) if expected else "0"))
            target = None
            i = end
        i += 1
    return found


@pytest.fixture
def notes_folder(tmp_path: Path) -> Path:
    missing = [p for p in NOTES if not p.is_file()]
    if missing or len(NOTES) < 5:
        pytest.skip(f"pip's markdown docs are not installed here ({PIP_DOCS})")
    notes = tmp_path / "notes"
    notes.mkdir()
    for path in NOTES:
        shutil.copy(path, notes / path.name)
    return tmp_path


def _cited_text(folder: Path, hit: dict[str, object]) -> str:
    custody = hit["custody"]
    assert isinstance(custody, dict)
    lines = (folder / "notes" / str(custody["source_path"])).read_text(encoding="utf-8").splitlines()
    return "\n".join(lines[int(custody["line_start"]) - 1 : int(custody["line_end"])])


def test_tutorial_runs_as_written(notes_folder: Path) -> None:
    found = steps(TUTORIAL.read_text(encoding="utf-8"))
    commands = [s[1] for s in found if s[0] == "run"]
    assert commands[0] == "race index notes --out notes-index" and len(commands) >= 10
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("NO_COLOR", None)
    outputs: list[subprocess.CompletedProcess[str]] = []
    receipts: list[dict[str, object]] = []
    for kind, what, detail in found:
        if kind == "file":
            (notes_folder / what).write_text(detail, encoding="utf-8")
            continue
        done = subprocess.run(
            ["bash", "-c", what], cwd=notes_folder, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == int(detail), f"{what}: exit {done.returncode}\n{done.stderr[-2000:]}"
        outputs.append(done)
        if "--json > receipt.json" in what:
            receipts.append(json.loads((notes_folder / "receipt.json").read_text(encoding="utf-8")))
    by_command = dict(zip(commands, outputs, strict=True))  # a repeated command keeps its last run

    # Step 5: the top items come from repeatable-installs.md, and every chunk the lexical leg
    # found for the flag holds the flag's own words (BM25 of "require-hashes").
    first = receipts[0]
    evidence = first["evidence"]
    assert isinstance(evidence, list) and len(evidence) == 5
    assert evidence[0]["hits"][0]["custody"]["source_path"] == "repeatable-installs.md"
    flag_hits = [h for e in evidence for h in e["hits"] if "hash-flag" in e["obligations"]]
    assert flag_hits
    for hit in flag_hits:
        if hit["custody"]["rsc"].startswith("tantivy.bm25"):
            assert re.search(r"require|hashes", _cited_text(notes_folder, hit), re.IGNORECASE)
    obligations = first["obligations"]
    assert isinstance(obligations, list)
    statuses = {o["id"]: o["status"] for o in obligations}
    assert statuses == {"how-to-pin": "satisfied", "hash-flag": "satisfied"}

    # Step 6 and 7: every citation held, then the edited file's did not, then the new run's do.
    verify = [o for c, o in zip(commands, outputs, strict=True) if c.startswith("race verify")]
    assert len(verify) == 3
    held = re.match(r"(\d+) citations: \1 valid, 0 moved, 0 changed, 0 missing", verify[0].stdout)
    assert held, verify[0].stdout
    assert "changed" in verify[1].stdout and not verify[1].stdout.startswith(
        f"{held.group(1)} citations: {held.group(1)} valid"
    )
    assert re.match(r"(\d+) citations: \1 valid", verify[2].stdout), verify[2].stdout

    # The packet quotes the cited lines literally, within its budget.
    packet = by_command["race context receipt.json --corpus notes --max-chars 1500"]
    quoted = re.findall(r"````quoted-data\n(.*?)\n````", packet.stdout, re.DOTALL)
    assert quoted and all(q in (notes_folder / "notes" / "repeatable-installs.md").read_text() for q in quoted)

    # Step 8: exit 3, the receipt still printed, and one stderr line naming the obligation.
    strict = by_command["race run strict.json --index notes-index   # exits 3"]
    assert "postfilter_only_filter" in strict.stdout
    assert strict.stderr == "race: mandatory obligations not satisfied: o (unsatisfied)\n"
