"""The index service behind ``race serve``'s routes: the engine's adapters for one index, the
scans it answers, and the faults a test may inject into them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import ValidationError

from backends import Adapter
from backends.remote.protocol import PROTOCOL_VERSION
from race.serving.limits import error
from rsc import BackendError, BackendTimeout, InputError, RaceError, ScanRequest, fingerprint, first_validation_error


@dataclass(frozen=True)
class Faults:
    """Injected faults for tests. All off by default; ``first`` = 0 means every scan request."""

    delay_ms: int = 0
    status: int | None = None
    truncate: bool = False
    drop: bool = False
    first: int = 0

    def describe(self) -> str:
        parts = [f"delay {self.delay_ms} ms"] if self.delay_ms else []
        parts += [f"status {self.status}"] if self.status is not None else []
        parts += ["truncate"] if self.truncate else []
        parts += ["drop"] if self.drop else []
        if parts and self.first:
            parts.append(f"first {self.first} scan requests only")
        return ", ".join(parts) or "none"


class IndexService:
    """The engine side of the server: the index's adapters, called on the server's event loop."""

    def __init__(self, adapters: Mapping[str, Adapter]) -> None:
        if not adapters:
            raise InputError("the index has no backends to serve")
        self.adapters = dict(sorted(adapters.items()))
        self._served = {c.ref: name for name, a in self.adapters.items() for c in a.index_contracts()}

    @property
    def identity(self) -> str:
        return "race-serve:" + "+".join(a.identity for a in self.adapters.values())

    def generation(self) -> str:
        generations = {name: a.generation() for name, a in self.adapters.items()}
        return "race-serve:" + fingerprint(generations)

    def contracts_document(self) -> dict[str, Any]:
        contracts = sorted((c for a in self.adapters.values() for c in a.index_contracts()), key=lambda c: c.ref)
        return {
            "schema_version": PROTOCOL_VERSION,
            "identity": self.identity,
            "generation": self.generation(),
            "contracts": [c.model_dump(mode="json") for c in contracts],
            "statistics": [a.statistics().model_dump(mode="json") for a in self.adapters.values()],
        }

    async def scan(self, body: bytes, deadline_ms: int | None) -> tuple[int, dict[str, Any]]:
        try:
            request = ScanRequest.model_validate_json(body)
        except ValidationError as exc:
            return error("bad_request", f"not a ScanRequest: {first_validation_error(exc)}")
        ref = f"{request.rsc_id}@{request.rsc_version}"
        backend = self._served.get(ref)
        if backend is None or backend != request.backend:
            return error("unknown_contract", f"this server serves no contract {ref} on backend {request.backend!r}")
        adapter = self.adapters[backend]
        try:
            if deadline_ms is None:
                result = await adapter.scan(request)
            else:
                with anyio.fail_after(deadline_ms / 1000.0):
                    result = await adapter.scan(request)
        except TimeoutError:
            return error("timeout", f"{ref}: no answer within the client's deadline of {deadline_ms} ms")
        except BackendTimeout as exc:
            return error("timeout", str(exc))
        except (BackendError, RaceError) as exc:
            return error("backend_error", str(exc))
        return 200, {
            "schema_version": PROTOCOL_VERSION,
            "generation": self.generation(),
            "backend": backend,
            "contract": ref,
            "request": fingerprint(request),
            "result": result.model_dump(mode="json"),
        }
