"""Scan requests built from a contract, as the planner would address one leg, and a scan run to
completion outside an event loop: shared by the adapter tests that call ``scan`` directly."""

from __future__ import annotations

from typing import Any

import anyio

from rsc import Contract, Filter, Query, ScanRequest, ScanResult


def request_for(contract: Contract, text: str, k: int, *, obligation: str = "o", **parts: Any) -> ScanRequest:
    """A request for ``contract``'s backend and mode, with the text query and ``k`` given."""
    return ScanRequest(
        obligation=obligation,
        rsc_id=contract.rsc_id,
        rsc_version=contract.version,
        backend=contract.backend,
        mode=contract.mode,
        query=Query(text=text),
        k=k,
        **parts,
    )


def milvus_request(adapter: Any, text: str, k: int, pushed: tuple[Filter, ...] = ()) -> ScanRequest:
    """A request for the first contract of a Milvus adapter's index."""
    return request_for(adapter.index_contracts()[0], text, k, obligation="milvus", pushed=pushed)


def scan_now(adapter: Any, request: ScanRequest) -> ScanResult:
    result: ScanResult = anyio.run(adapter.scan, request)
    return result
