"""``race serve``: the race.remote/1 protocol, loopback only, clean shutdown."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from backends.remote.protocol import PROTOCOL_VERSION
from race.serving.serve import loopback_host
from rsc import BackendUnavailable, InputError, ScanRequest
from tests.remote.conftest import Server, launch, remote_plan, run_cli, wait_ready


def test_contracts_document(server: Server) -> None:
    response = httpx.get(server.url + "/v1/contracts")
    assert response.status_code == 200
    assert response.headers["x-race-protocol"] == PROTOCOL_VERSION
    doc = response.json()
    assert doc["schema_version"] == PROTOCOL_VERSION
    assert doc["generation"].startswith("race-serve:xxh3_128:")
    assert doc["generation"] == response.headers["x-race-generation"]
    refs = {f"{c['rsc_id']}@{c['version']}" for c in doc["contracts"]}
    assert {"tantivy.bm25@1.0.0", "tantivy.exact@1.1.0"} <= refs
    assert all(c["egress"] == "local" for c in doc["contracts"])


def test_the_contracts_document_is_parsed_once_per_distinct_body(server: Server) -> None:
    """Every run reads the document again for the generation: the same bytes give the same
    (immutable) record without a new parse; other bytes are parsed anew, and a malformed
    document is refused every time it is read."""
    from backends.remote.adapter import _parse_info

    body = httpx.get(server.url + "/v1/contracts").content
    first = _parse_info(body, where="test")
    assert _parse_info(bytes(body), where="test") is first
    doc = json.loads(body)
    doc["generation"] = "race-serve:xxh3_128:" + "0" * 32
    moved = _parse_info(json.dumps(doc).encode(), where="test")
    assert moved.generation != first.generation and moved.contracts == first.contracts
    broken = body.replace(b'"contracts"', b'"contractz"')
    for _ in range(2):
        with pytest.raises(BackendUnavailable, match="malformed contracts document"):
            _parse_info(broken, where="test")


def _scan_body(**update: object) -> bytes:
    request = ScanRequest(
        obligation="o",
        rsc_id="tantivy.bm25",
        rsc_version="1.0.0",
        backend="tantivy",
        mode="bm25",
        query={"text": "replication raft"},  # type: ignore[arg-type]
        k=3,
    ).model_copy(update=update)
    return request.model_dump_json().encode()


def test_scan_and_its_errors(server: Server) -> None:
    ok = httpx.post(server.url + "/v1/scan", content=_scan_body())
    assert ok.status_code == 200
    body = ok.json()
    assert body["contract"] == "tantivy.bm25@1.0.0" and body["backend"] == "tantivy"
    assert len(body["result"]["hits"]) == 3
    cases = [
        (b"{not json", 400, "bad_request"),
        (_scan_body(rsc_version="9.0.0"), 422, "unknown_contract"),
        (_scan_body(backend="lancedb"), 422, "unknown_contract"),
    ]
    for data, status, kind in cases:
        response = httpx.post(server.url + "/v1/scan", content=data)
        assert response.status_code == status
        assert response.json()["error"]["kind"] == kind
    assert httpx.get(server.url + "/v1/nothing").status_code == 404


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::1", "example.org"])
def test_refuses_to_serve_beyond_loopback(host: str) -> None:
    with pytest.raises(InputError, match="--host"):
        loopback_host(host)
    assert loopback_host("localhost") == "127.0.0.1"
    assert loopback_host("127.0.0.2") == "127.0.0.2"


def test_cli_refusal_is_one_line_and_exit_2(index_dir: Path) -> None:
    done = run_cli("serve", "--index", str(index_dir), "--host", "0.0.0.0", "--port", "0", timeout=30)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--host" in done.stderr


def test_sigint_also_stops_cleanly(index_dir: Path) -> None:
    import signal

    process = launch(index_dir)
    running = wait_ready(process)
    process.send_signal(signal.SIGINT)
    assert running.stop() == 0  # a second stop signal during the shutdown changes nothing


def test_cli_run_with_remote(server: Server, index_dir: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(remote_plan()))
    done = run_cli("run", str(plan), "--index", str(index_dir), "--remote", server.url, "--json")
    assert done.returncode == 0, done.stderr
    receipt = json.loads(done.stdout)
    assert receipt["obligations"][0]["served_by"] == ["remote.bm25@1.0.0"]
    assert receipt["operational"]["calls"] == {"remote": 1}
