"""Replay of retained artifacts of the wrong shape fails closed: one line naming the
artifact, exit status 2, never a KeyError or TypeError. Each case rewrites one field of one
artifact of a real retained run, stores it under its new digest (so the hash check passes)
and lists that digest in the receipt."""

from __future__ import annotations

import json
from collections.abc import Callable
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
    ("plan", "models", [{"name": None, "dims": 384}]),
    ("plan", "models", [{"name": "m", "dims": [384]}]),
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
    def change(art: dict[str, Any]) -> None:
        art[name] = value
        if kind == "scan" and name == "error":
            art["outcome"] = "error"

    return _readdressed(root, receipt, kind, change, out)


def _readdressed(
    root: Path, receipt: dict[str, Any], kind: str, change: Callable[[dict[str, Any]], None], out: Path
) -> Path:
    """The receipt listing the first ``kind`` artifact changed by ``change`` and stored under
    its new digest, so that the hash check passes."""
    retained = list(receipt["retained"])
    for i, digest in enumerate(retained):
        art = json.loads(artifact_path(root, digest).read_bytes())
        if art.get("kind") == kind:
            change(art)
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


def _replay_fails_closed_naming(receipt_file: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["replay", str(receipt_file), "--retained", str(root), "--json"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith(f"race: error: {root / 'artifacts'}/"), err
    return err


def test_a_renamed_obligation_in_the_plan_artifact_fails_closed(
    retained_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The logical plan of the plan artifact is bound to the receipt's plan fingerprint: an
    obligation renamed throughout it (a valid plan, re-addressed) is not run (it was a
    ``LookupError``, exit 1)."""
    root, receipt = retained_run
    renamed = receipt["obligations"][0]["id"]

    def rename(art: dict[str, Any]) -> None:
        art["logical"] = json.loads(json.dumps(art["logical"]).replace(f'"{renamed}"', f'"{renamed}-x"'))

    err = _replay_fails_closed_naming(_readdressed(root, receipt, "plan", rename, tmp_path), root, capsys)
    assert "its logical plan is not the plan of the receipt's plan fingerprint" in err


def test_a_related_answer_holding_a_number_fails_closed(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A supersession answer whose id became a number is refused, naming the artifact (it was
    read as a failed supersession check, or replayed as if nothing had changed)."""
    root = tmp_path / "r"
    receipt = json.loads(
        Engine.open(index_dir).run_sync(FIXTURES / "plans" / "freshness_superseded.json", retain=root).model_dump_json()
    )

    def numbered(art: dict[str, Any]) -> None:
        assert art["method"] == "related"
        listed = [ids for ids in art["answer"].values() if ids]
        assert listed, "the run found no supersession edge to alter"
        for ids in listed:
            ids[-1] = 5

    err = _replay_fails_closed_naming(_readdressed(root, receipt, "relations", numbered, tmp_path), root, capsys)
    assert "holds no related answer (a JSON object of lists of strings)" in err


def test_a_consistent_forgery_is_refused(
    retained_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scan artifact altered, stored under its new digest and listed in an edited receipt
    passes every artifact's own hash; the lineage id, recomputed from the responses, does not
    (it replayed with exit 0, naming the original live lineage)."""
    root, receipt = retained_run

    def altered(art: dict[str, Any]) -> None:
        art["retrieved_at"] = "2020-01-01T00:00:00.000000Z"

    receipt_file = _readdressed(root, receipt, "scan", altered, tmp_path)
    code = main(["replay", str(receipt_file), "--retained", str(root), "--json"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and f"not those lineage {receipt['lineage']['id']} fetched" in err, err
