"""Retained responses: content-addressed artifacts of what every leg of a live run received.

Layout of a retention directory (see ``docs/remote-protocol.md``)::

    DIR/artifacts/<sha256 hex>.json   one artifact; its bytes are the canonical JSON of its
                                      content and its name is their sha256, so one altered
                                      byte no longer matches the name
    DIR/plans/<plan fp hex>.json      pointer: the plan artifact of the latest retained run
    DIR/receipts/<lineage hex>.json   the receipt of each retained run

Artifact kinds: ``plan`` (logical plan, explain, generations, models, backends open),
``scan`` (one leg: request fingerprint, outcome, retrieval time and, for a response, its
status, the headers that matter and the body bytes: the raw HTTP body for a remote leg,
the ``ScanResult`` JSON for a local one) and ``relations`` (one source-dependence lookup
the runtime made of the graph backend).

Lineage: a live run that fetched or retained any response is its own lineage. Its id is
the fingerprint of the plan fingerprint and the digests of the responses as fetched
(which include their retrieval time); every artifact then names that id. A run that did
neither keeps the engine's deterministic lineage id.

Nothing is written until the run has finished: a failed run leaves no artifact, and each
file is written to a temporary name and renamed into place.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

import anyio
import anyio.to_thread

from backends import Adapter
from planner import Explain, LogicalPlan, scans
from race.receipt import Lineage as ReceiptLineage
from race.receipt import Receipt
from race.run.executor import Lineage
from race.run.legs import LegRecord
from race.state.artifacts import (
    ARTIFACT_SCHEMA_VERSION,
    PLANS,
    RECEIPTS,
    artifact_path,
    encode_body,
    exchange_response,
    hex_of,
    lookup_key,
    sha256_digest,
    utc_now,
    write_atomically,
)
from rsc import BackendStatistics, Contract, InputError, ScanRequest, ScanResult, canonical_json, fingerprint

if TYPE_CHECKING:
    from backends.remote import RemoteAdapter

Outcome = Literal["response", "error", "deadline", "not_started"]


def _is_remote(adapter: Adapter | None) -> TypeGuard[RemoteAdapter]:
    """Whether ``adapter`` is a remote one. None exists unless its module was imported, so a run
    over local backends never imports the HTTP client to ask."""
    module = sys.modules.get("backends.remote.adapter")
    return module is not None and isinstance(adapter, module.RemoteAdapter)


def request_ref(request: ScanRequest) -> str:
    return f"{request.rsc_id}@{request.rsc_version}"


@dataclass
class LegResponse:
    """What one leg received, before the run's lineage id is known."""

    request: ScanRequest
    transport: Literal["http", "local"]
    retrieved_at: str
    outcome: Outcome
    response: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    verdict: str | None = None

    @property
    def label(self) -> str:
        return f"{self.request.obligation}/{request_ref(self.request)}"

    def content(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": ARTIFACT_SCHEMA_VERSION,
            "kind": "scan",
            "obligation": self.request.obligation,
            "rsc": request_ref(self.request),
            "backend": self.request.backend,
            "request": fingerprint(self.request),
            "request_body": self.request.model_dump(mode="json"),
            "transport": self.transport,
            "retrieved_at": self.retrieved_at,
            "outcome": self.outcome,
        }
        if self.response is not None:
            out["response"] = self.response
        if self.error is not None:
            out["error"] = self.error
        if self.verdict is not None:
            out["verdict"] = self.verdict
        return out


class Delegate(Adapter):
    """An adapter that stands in for another one (or for none) with the same ``scan`` signature."""

    def __init__(self, backend: str, inner: Adapter | None = None) -> None:
        self.backend = backend  # type: ignore[misc]
        self.inner = inner

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return self.inner.contracts() if self.inner is not None else ()

    @classmethod
    def build(cls, corpus: Any, index_dir: Path, progress: Any = None) -> str:
        raise NotImplementedError("a delegate adapter is never built")

    @classmethod
    def open(cls, index_dir: Path) -> Delegate:
        raise NotImplementedError("a delegate adapter is never opened")

    @property
    def identity(self) -> str:
        return self.inner.identity if self.inner is not None else f"{self.backend}:replay"

    def generation(self) -> str:
        return self.inner.generation() if self.inner is not None else "replay"

    async def current_generation(self) -> str:
        return await self.inner.current_generation() if self.inner is not None else "replay"

    @property
    def reads_generation_inline(self) -> bool:
        return self.inner.reads_generation_inline if self.inner is not None else True

    def statistics(self) -> BackendStatistics:
        return self.inner.statistics() if self.inner is not None else BackendStatistics(backend=self.backend, rows=0)

    async def scan(self, request: ScanRequest) -> ScanResult:
        raise NotImplementedError


class RecordingAdapter(Delegate):
    """Runs the real adapter and records what the leg received. Remote legs record the raw
    exchange and decode it through the same function replay uses."""

    def __init__(self, inner: Adapter, recorder: RunRecorder) -> None:
        super().__init__(inner.backend, inner)
        self.live = inner
        self.recorder = recorder

    async def scan(self, request: ScanRequest) -> ScanResult:
        retrieved_at = utc_now()
        transport: Literal["http", "local"] = "http" if _is_remote(self.live) else "local"
        try:
            if _is_remote(self.live):
                exchange = await self.live.fetch(request)
            else:
                result = await self.live.scan(request)
        except Exception as exc:
            # Whatever the adapter raised becomes a gap; replay raises it again by name.
            error = {"class": type(exc).__name__, "message": str(exc)}
            self.recorder.add(LegResponse(request, transport, retrieved_at, "error", error=error))
            raise
        except anyio.get_cancelled_exc_class():
            # The executor's deadline; whether it was the leg's or the plan's is known after the run.
            self.recorder.add(LegResponse(request, transport, retrieved_at, "deadline"))
            raise
        if _is_remote(self.live):
            self.recorder.add(LegResponse(request, transport, retrieved_at, "response", exchange_response(exchange)))
            return self.live.decode(request, exchange)
        body = result.model_dump_json().encode("utf-8")
        self.recorder.add(LegResponse(request, transport, retrieved_at, "response", encode_body(body)))
        return result


class RecordingRelations:
    """The graph's source-dependence answers, recorded so that replay needs no graph."""

    def __init__(self, inner: Lineage, recorder: RunRecorder) -> None:
        self.inner = inner
        self.recorder = recorder

    def origins(self, node_ids: Sequence[str]) -> dict[str, str]:
        answer = self.inner.origins(node_ids)
        self.recorder.lookup("origins", {"node_ids": list(node_ids)}, answer)
        return answer

    def related(self, ids: Sequence[str], relation: str, direction: str) -> dict[str, tuple[str, ...]]:
        answer = self.inner.related(ids, relation, direction)
        self.recorder.lookup("related", {"ids": list(ids), "relation": relation, "direction": direction}, answer)
        return answer


@dataclass
class RunRecorder:
    """One live run's recording: wraps the adapters, then names the lineage and keeps artifacts.

    Remote legs are always recorded (a re-fetched remote answer is a new lineage); local legs
    and graph lookups only when the run retains.
    """

    adapters: Mapping[str, Adapter]
    relations: Lineage | None
    retain: Path | None = None
    responses: list[LegResponse] = field(default_factory=list)
    lookups: dict[str, dict[str, Any]] = field(default_factory=dict)
    artifacts: list[tuple[str, bytes]] = field(default_factory=list)
    plan_digest: str | None = None
    finished: bool = False

    def __post_init__(self) -> None:
        if self.retain is not None and self.retain.exists() and not self.retain.is_dir():
            raise InputError("exists and is not a directory; cannot retain artifacts there", where=str(self.retain))
        self.adapters = {
            name: RecordingAdapter(a, self) if self.retain is not None or _is_remote(a) else a
            for name, a in self.adapters.items()
        }
        if self.retain is not None and self.relations is not None:
            self.relations = RecordingRelations(self.relations, self)

    def _transport(self, backend: str) -> Literal["http", "local"]:
        adapter = self.adapters.get(backend)
        live = adapter.live if isinstance(adapter, RecordingAdapter) else adapter
        return "http" if _is_remote(live) else "local"

    def add(self, response: LegResponse) -> None:
        # A leg the run left behind that answers after the run finished is not recorded: the
        # run never read that answer (race.run.detached).
        if not self.finished:
            self.responses.append(response)

    def lookup(self, method: str, args: dict[str, Any], answer: Mapping[str, Any]) -> None:
        key = lookup_key(method, args)
        self.lookups.setdefault(
            key,
            {
                "schema_version": ARTIFACT_SCHEMA_VERSION,
                "kind": "relations",
                "key": key,
                "method": method,
                "args": args,
                "answer": {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(answer.items())},
            },
        )

    def finish(
        self,
        receipt: Receipt,
        *,
        plan: LogicalPlan,
        explain: Explain,
        legs: Mapping[str, LegRecord],
        generations: Mapping[str, str],
        models: Sequence[Mapping[str, str | int]],
        early_stop: bool = True,
    ) -> Receipt:
        """The receipt with its lineage id and, when retaining, the artifact digests (nothing written yet)."""
        self.finished = True
        for response in self.responses:
            if response.outcome == "deadline":
                record = legs.get(response.label)
                response.verdict = record.outcome if record is not None else "timeout"
        # A leg left behind whose adapter never saw its cancellation has recorded nothing yet.
        seen = {response.label for response in self.responses}
        for scan in scans(explain.physical):
            label = f"{scan.node}/{scan.rsc}"
            record = legs.get(label)
            if label not in seen and record is not None and record.outcome in ("timeout", "cancelled"):
                transport = self._transport(scan.request.backend)
                left = LegResponse(scan.request, transport, utc_now(), "deadline", verdict=record.outcome)
                if self.retain is not None or transport == "http":
                    self.responses.append(left)
                    seen.add(label)
        if self.retain is not None:
            for scan in scans(explain.physical):
                label = f"{scan.node}/{scan.rsc}"
                record = legs.get(label)
                if record is not None and record.outcome == "resource_limited" and record.cache == "none":
                    transport = self._transport(scan.request.backend)
                    self.responses.append(LegResponse(scan.request, transport, utc_now(), "not_started"))
        if not self.responses and self.retain is None:
            return receipt
        self.responses.sort(key=lambda r: (r.request.obligation, request_ref(r.request), fingerprint(r.request)))
        fetched = sorted(sha256_digest(canonical_json(r.content())) for r in self.responses)
        plan_fp = receipt.fingerprints.plan
        created_at = utc_now()
        basis: dict[str, Any] = {"plan": plan_fp, "mode": "live", "fetched": fetched}
        if self.retain is not None:
            basis["retained_at"] = created_at  # a retained run is its own lineage even with no leg
        lineage = fingerprint(basis)
        if self.retain is None:
            return receipt.model_copy(update={"lineage": ReceiptLineage(id=lineage, mode="live")})
        stamp = {"lineage": lineage, "plan": plan_fp}
        plan_content = {
            "schema_version": ARTIFACT_SCHEMA_VERSION,
            "kind": "plan",
            **stamp,
            "logical": plan.model_dump(mode="json"),
            "explain": explain.model_dump(mode="json"),
            "generations": dict(sorted(generations.items())),
            "models": [dict(m) for m in models],
            "backends_open": sorted(self.adapters),
            "relations": self.relations is not None,
            "early_stop": early_stop,
            "created_at": created_at,
        }
        contents = [plan_content]
        contents += [{**r.content(), **stamp} for r in self.responses]
        contents += [{**self.lookups[k], **stamp} for k in sorted(self.lookups)]
        self.artifacts = [(sha256_digest(data), data) for data in (canonical_json(c) for c in contents)]
        self.plan_digest = self.artifacts[0][0]
        return receipt.model_copy(
            update={
                "lineage": ReceiptLineage(id=lineage, mode="live"),
                "retained": tuple(digest for digest, _ in self.artifacts),
            }
        )

    async def commit(self, receipt: Receipt) -> None:
        """Write the artifacts, the plan pointer and the receipt; all or (as far as we can tell) none."""
        if self.retain is None:
            return
        try:
            await anyio.to_thread.run_sync(self._commit, self.retain, receipt)
        except OSError as exc:
            raise InputError(f"cannot write retained artifacts: {exc.strerror}", where=str(self.retain)) from exc

    def _commit(self, root: Path, receipt: Receipt) -> None:
        written: list[Path] = []
        try:
            for digest, data in self.artifacts:
                path = artifact_path(root, digest)
                if not path.exists():
                    write_atomically(path, data)
                    written.append(path)
            pointer = {
                "schema_version": ARTIFACT_SCHEMA_VERSION,
                "plan": receipt.fingerprints.plan,
                "artifact": self.plan_digest,
                "lineage": receipt.lineage.id,
            }
            write_atomically(root / PLANS / (hex_of(receipt.fingerprints.plan) + ".json"), canonical_json(pointer))
            write_atomically(
                root / RECEIPTS / (hex_of(receipt.lineage.id) + ".json"),
                (receipt.model_dump_json(indent=2) + "\n").encode("utf-8"),
            )
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)
            raise
