"""I8: retained responses and exact replay. A live run keeps every leg's response as a
content-addressed artifact; replay reproduces the normalized receipt from those artifacts
alone (server stopped, no index), and a missing or altered artifact fails closed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from race.engine import Engine
from race.state.artifacts import ARTIFACTS, artifact_path, receipt_path
from race.state.replay import load_receipt
from rsc import ArtifactMissing, ArtifactTampered, GapKind, ReplayError
from tests.conftest import FIXTURES
from tests.remote.conftest import Server, remote_plan, run_cli, start_all

pytestmark = pytest.mark.anyio


def mixed_plan() -> dict[str, Any]:
    """Remote exact + remote BM25 + a local BM25 leg and a freshness check (graph lookups)."""
    return {
        "schema_version": "race.plan/1",
        "root": "answer",
        "obligations": [
            {
                "id": "cve-id",
                "kind": "seek_support",
                "query": {"text": "CVE-2024-31337"},
                "query_class": "identifier",
                "k": 40,
                "egress": "remote_ok",
                "allow_contracts": ["remote.exact"],
            },
            {
                "id": "fixed-release",
                "kind": "seek_fresher_state",
                "query": {"text": "CVE-2024-31337 fixed release upgrade 3.4.2"},
                "query_class": "lexical",
                "hard_filters": [{"field": "authority", "op": "in", "values": ["official", "maintainer"]}],
                "freshness": {"as_of": "2026-11-30"},
                "k": 5,
                "egress": "remote_ok",
                "allow_contracts": ["remote.bm25"],
            },
            {
                "id": "tls-defeater",
                "kind": "seek_refutation",
                "query": {"text": "TLS enough to mitigate CVE-2024-31337"},
                "query_class": "lexical",
                "k": 5,
            },
        ],
        "operators": [
            {"id": "fix-vs-tls", "op": "oppose", "support": "fixed-release", "refutation": "tls-defeater"},
            {"id": "answer", "op": "union", "inputs": ["cve-id", "fix-vs-tls"]},
        ],
    }


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(b"bm25") if b"bm25" in data else len(data) // 2
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


async def test_live_retained_run_replays_byte_for_byte_after_the_server_stops(index_dir: Path, tmp_path: Path) -> None:
    (server,) = start_all(index_dir, [()])
    try:
        engine = Engine.open(index_dir, remotes=[server.url])
        retained = tmp_path / "retained"
        live = await engine.run(mixed_plan(), retain=retained)
        again = await engine.run(mixed_plan(), retain=tmp_path / "again")
    finally:
        assert server.stop() == 0
    backends = {h.custody.backend for e in live.evidence for h in e.hits}
    assert backends == {"remote", "tantivy"}
    assert live.lineage.mode == "live" and live.retained
    # A live re-query is a new lineage, though it found the same evidence.
    assert again.lineage.id != live.lineage.id
    assert again.normalized_bytes() == live.normalized_bytes()
    kinds = [json.loads(artifact_path(retained, d).read_bytes())["kind"] for d in live.retained]
    assert kinds[0] == "plan" and kinds.count("scan") == 3 and "relations" in kinds
    for digest in live.retained:
        assert artifact_path(retained, digest).name == digest.removeprefix("sha256:") + ".json"

    # Server gone; replay from a fresh engine with no backend at all.
    replayed = await Engine({}).replay(live, retained)
    assert replayed.normalized_bytes() == live.normalized_bytes()
    assert replayed.lineage.mode == "replay" and replayed.lineage.parent == live.lineage.id
    assert replayed.retained == live.retained
    assert replayed.operational.replayed_artifacts == len(live.retained)
    assert replayed.operational.result_cache == {}

    # The receipt copy in the retention directory replays through the CLI as well.
    saved = receipt_path(retained, live)
    assert load_receipt(saved).normalized_bytes() == live.normalized_bytes()
    done = run_cli("replay", str(saved), "--retained", str(retained), "--json")
    assert done.returncode == 0, done.stderr
    assert load_receipt_text(done.stdout).normalized_bytes() == live.normalized_bytes()


def load_receipt_text(text: str) -> Any:
    from race.receipt import Receipt

    return Receipt.model_validate_json(text)


def _first_scan_artifact(retained: Path, digests: tuple[str, ...]) -> Path:
    scan = next(d for d in digests if json.loads(artifact_path(retained, d).read_bytes())["kind"] == "scan")
    return artifact_path(retained, scan)


async def test_altered_or_missing_artifact_fails_closed(index_dir: Path, tmp_path: Path) -> None:
    engine = Engine.open(index_dir)
    retained = tmp_path / "retained"
    live = await engine.run(FIXTURES / "plans" / "showcase.json", retain=retained)
    target = _first_scan_artifact(retained, live.retained)
    original = target.read_bytes()

    _flip_one_byte(target)
    with pytest.raises(ArtifactTampered, match=target.name):
        await Engine({}).replay(live, retained)
    target.unlink()
    with pytest.raises(ArtifactMissing, match=target.name):
        await Engine({}).replay(live, retained)
    target.write_bytes(original)
    replayed = await Engine({}).replay(receipt_path(retained, live), retained)
    assert replayed.normalized_bytes() == live.normalized_bytes()


async def test_failure_gaps_replay_exactly(index_dir: Path, tmp_path: Path, fault_servers: dict[str, Server]) -> None:
    """Timeouts (the executor's verdict) and bad statuses are retained and replayed too."""
    plans = [
        ("hang", remote_plan(deadline_ms=200), GapKind.TIMEOUT),
        ("hang", remote_plan(deadline_ms=5000, plan_deadline_ms=200), GapKind.CANCELLED),
        ("status", remote_plan(deadline_ms=60_000), GapKind.BACKEND_ERROR),
    ]
    for n, (name, plan, kind) in enumerate(plans):
        engine = Engine.open(index_dir, remotes=[fault_servers[name].url])
        live = await engine.run(plan, retain=tmp_path / str(n))
        assert [g.kind for g in live.gaps] == [kind]
        replayed = await Engine({}).replay(live, tmp_path / str(n))
        assert replayed.normalized_bytes() == live.normalized_bytes()


async def test_a_run_without_retention_cannot_be_replayed(index_dir: Path, tmp_path: Path) -> None:
    live = await Engine.open(index_dir).run(FIXTURES / "plans" / "showcase.json")
    assert live.retained == ()
    with pytest.raises(ReplayError, match="no retained artifacts"):
        await Engine({}).replay(live, tmp_path)


async def test_an_adapter_bug_is_a_retained_gap_that_replays(index_dir: Path, tmp_path: Path) -> None:
    """Any exception an adapter raises is a gap on its obligation, recorded by type and message,
    and replay reproduces the receipt byte for byte from the retained error."""
    from tests.conftest import WrappedAdapter

    base = Engine.open(index_dir)
    broken = WrappedAdapter(base.adapters["tantivy"], failures={"tls-defeater": KeyError("bug")})
    engine = Engine({**base.adapters, "tantivy": broken})
    retained = tmp_path / "retained"
    live = await engine.run(FIXTURES / "plans" / "showcase.json", retain=retained)
    failed = [g for g in live.gaps if g.obligation == "tls-defeater" and g.kind is GapKind.BACKEND_ERROR]
    assert len(failed) == 1 and "KeyError: 'bug'" in failed[0].detail
    replayed = await Engine({}).replay(live, retained)
    assert replayed.normalized_bytes() == live.normalized_bytes()


async def test_a_failed_run_leaves_no_artifact(
    index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from race.run.executor import Executor

    async def crash(self: Executor) -> None:
        raise RuntimeError("internal error after the legs")

    monkeypatch.setattr(Executor, "run", crash)
    retained = tmp_path / "retained"
    with pytest.raises(RuntimeError):
        await Engine.open(index_dir).run(FIXTURES / "plans" / "showcase.json", retain=retained)
    assert not (retained / ARTIFACTS).exists() or list((retained / ARTIFACTS).iterdir()) == []


def test_cli_retain_replay_and_fail_closed(index_dir: Path, tmp_path: Path) -> None:
    """Local legs only: replay needs no index; an altered artifact is exit 2 with one line."""
    retained = tmp_path / "retained"
    plan = FIXTURES / "plans" / "showcase.json"
    live = run_cli("run", str(plan), "--index", str(index_dir), "--retain", str(retained), "--json")
    assert live.returncode == 0, live.stderr
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_text(live.stdout)
    replay = run_cli("replay", str(receipt_file), "--retained", str(retained), "--json")
    assert replay.returncode == 0, replay.stderr
    a, b = load_receipt(receipt_file), load_receipt_text(replay.stdout)
    assert a.normalized_bytes() == b.normalized_bytes()
    assert b.lineage.parent == a.lineage.id

    target = _first_scan_artifact(retained, a.retained)
    _flip_one_byte(target)
    done = run_cli("replay", str(receipt_file), "--retained", str(retained))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and target.name in done.stderr and "altered" in done.stderr


async def test_retention_into_a_file_is_bad_input(index_dir: Path, tmp_path: Path) -> None:
    from rsc import InputError

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        await Engine.open(index_dir).run(FIXTURES / "plans" / "showcase.json", retain=blocker)
    assert blocker.read_text() == "x"
