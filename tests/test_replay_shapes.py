"""Replay of retained artifacts of the wrong shape fails closed: one line naming the
artifact, exit status 2, never a KeyError or TypeError. Each case rewrites one field of one
artifact of a real retained run, stores it under its new digest (so the hash check passes)
and lists that digest in the receipt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from race.cli.main import main
from race.engine import Engine
from race.state.artifacts import artifact_path, sha256_digest
from tests.conftest import FIXTURES

PLAN = FIXTURES / "plans" / "corroborate_independent.json"

# (artifact kind, field, value written in its place)
CASES: list[tuple[str, str, Any]] = [
    ("plan", "models", ["not-a-model"]),
    ("plan", "models", "abc"),
    ("plan", "models", 7),
    ("plan", "generations", ["tantivy"]),
    ("plan", "generations", None),
    ("plan", "logical", 5),
    ("plan", "logical", {"schema_version": "race.plan/1"}),
    ("plan", "explain", "x"),
    ("plan", "backends_open", 7),
    ("plan", "relations", None),
    ("scan", "outcome", "exploded"),
    ("scan", "response", 5),
    ("scan", "response", {"body": 5}),
    ("scan", "request", 5),
    ("scan", "kind", "plan"),
    ("scan", "error", "boom"),
    ("relations", "answer", []),
    ("relations", "answer", "abc"),
    ("relations", "answer", 5),
    ("relations", "key", None),
]


@pytest.fixture(scope="module")
def retained_run(tmp_path_factory: pytest.TempPathFactory, index_dir: Path) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("retained")
    receipt = Engine.open(index_dir).run_sync(PLAN, retain=root / "r")
    return root / "r", json.loads(receipt.model_dump_json())


def _rewrite(root: Path, receipt: dict[str, Any], kind: str, name: str, value: Any, out: Path) -> Path:
    retained = list(receipt["retained"])
    for i, digest in enumerate(retained):
        art = json.loads(artifact_path(root, digest).read_bytes())
        if art.get("kind") == kind:
            art[name] = value
            if kind == "scan" and name == "error":
                art["outcome"] = "error"
            data = json.dumps(art).encode()
            retained[i] = sha256_digest(data)
            path = artifact_path(root, retained[i])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            break
    else:
        pytest.skip(f"the run retained no {kind} artifact")
    receipt_file = out / "receipt.json"
    receipt_file.write_text(json.dumps(receipt | {"retained": retained}))
    return receipt_file


@pytest.mark.parametrize(("kind", "name", "value"), CASES, ids=[f"{k}.{n}={v!r}" for k, n, v in CASES])
def test_wrong_shaped_artifact_fails_closed(
    retained_run: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    kind: str,
    name: str,
    value: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, receipt = retained_run
    receipt_file = _rewrite(root, receipt, kind, name, value, tmp_path)
    before = sorted(tmp_path.rglob("*"))
    code = main(["replay", str(receipt_file), "--retained", str(root), "--json"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("race: error: "), err
    assert sorted(tmp_path.rglob("*")) == before
