"""The remote adapter: the contracts of a ``race serve`` server, reached over HTTP with httpx.

A scan is two steps with one seam between them: ``fetch`` sends the translated request and
returns the raw ``Exchange`` (status, the headers that matter, the body bytes), and
``decode_exchange`` (in ``backends.remote.decode``) turns those bytes into a ``ScanResult``.
The runtime retains exchanges and replays them through the very same ``decode_exchange``, so
a replayed answer is parsed exactly as the live one was.

Clients: each instance keeps one pooled ``httpx.AsyncClient`` (``backends.remote.pool``),
made at its first request, reused by every scan and generation read, closed by ``aclose``
(the engine closes its adapters). The client timeout, the pool size and the egress class of
the contracts are per instance, set at construction (a catalog sets them per instance).

Native failures are translated here, at the adapter edge: httpx timeouts become
``BackendTimeout``; refused or dropped connections, truncated or malformed bodies and bad
statuses become ``BackendUnavailable``. A partial response is never evidence.

Snapshots. The generation is the one the server reports, read afresh each time, and
``unknown`` when it cannot be read: never a value remembered from an earlier read. A remote
cannot be held at a snapshot, so a run's pinned adapter checks the generation every answer
carries: an answer from another generation than the planned one is ``SnapshotMoved``, as is
any scan planned while the generation was unknown.

Custody: hits keep the server's custody (source path, lines, hashes, chunk, corpus
revision, rank, native score) with ``backend = "remote"``, ``rsc`` = the remote contract
ref, ``request`` = the fingerprint of the remote request, ``index_identity`` =
``remote:<upstream contract ref>:<server index identity>`` and ``index_generation`` = the
server's advertised generation.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self
from urllib.parse import urlsplit

import anyio
import httpx
from pydantic import ValidationError

from backends.base import UNKNOWN_GENERATION, Adapter, Progress, load_contracts_beside
from backends.ingest.corpus import Corpus
from backends.remote.decode import BACKEND
from backends.remote.decode import UPSTREAM as UPSTREAM
from backends.remote.decode import Exchange as Exchange
from backends.remote.decode import decode_exchange as decode_exchange
from backends.remote.decode import upstream_request as upstream_request
from backends.remote.pool import DEFAULT_MAX_CONNECTIONS, ClientPool
from backends.remote.protocol import (
    CONTRACTS_PATH,
    DEADLINE_HEADER,
    PROTOCOL_VERSION,
    RETAINED_HEADERS,
    SCAN_PATH,
)
from rsc import (
    BackendStatistics,
    BackendTimeout,
    BackendUnavailable,
    Contract,
    ContractEgress,
    ContractError,
    InputError,
    ScanRequest,
    ScanResult,
    SnapshotMoved,
    VersionRange,
    parse_contract,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerInfo:
    """What ``GET /v1/contracts`` advertised."""

    identity: str
    generation: str
    contracts: tuple[Contract, ...]
    statistics: tuple[BackendStatistics, ...]


@functools.lru_cache(maxsize=8)
def _parse_info(data: bytes, *, where: str) -> ServerInfo:
    """The contracts document ``data``, validated. Every run reads it again for the server's
    generation (I6), and a server answers the same bytes while its index stands: those are
    parsed once (1.2 ms for a tantivy server's six contracts) and the record, immutable, kept."""
    try:
        raw = json.loads(data)
        if raw.get("schema_version") != PROTOCOL_VERSION:
            raise BackendUnavailable(
                f"not a {PROTOCOL_VERSION} server (schema_version {raw.get('schema_version')!r})", where=where
            )
        contracts = tuple(
            parse_contract(json.dumps(doc), where=f"{where} contracts[{i}]") for i, doc in enumerate(raw["contracts"])
        )
        stats = tuple(BackendStatistics.model_validate(s) for s in raw.get("statistics", []))
        return ServerInfo(str(raw["identity"]), str(raw["generation"]), contracts, stats)
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
        raise BackendUnavailable(f"malformed contracts document ({exc})", where=where) from exc


def check_served(declared: tuple[Contract, ...], served: tuple[Contract, ...], *, where: str) -> dict[str, Contract]:
    """Each declared remote contract -> the server contract that backs it; fail closed otherwise.

    The server must serve the upstream id at a compatible version, and promise at least what
    the remote contract claims: same mode, ordering, score kind, coverage claim and model
    calls, every query class and query part, and every filter with the same support class
    and at least the same operators.
    """
    chosen: dict[str, Contract] = {}
    for contract in declared:
        up_id, versions = UPSTREAM[contract.rsc_id]
        rng = VersionRange.parse(versions)
        candidates = [c for c in served if c.rsc_id == up_id and rng.contains(c.semver)]
        if not candidates:
            offered = ", ".join(sorted(c.ref for c in served)) or "nothing"
            raise ContractError(
                f"server does not serve {up_id} {versions} (needed by {contract.ref}); it serves {offered}",
                where=where,
            )
        upstream = max(candidates, key=lambda c: c.semver)
        problems = _weaker(contract, upstream)
        if problems:
            raise ContractError(f"{upstream.ref} cannot back {contract.ref}: {problems[0]}", where=where)
        chosen[contract.rsc_id] = upstream
    return chosen


def _weaker(remote: Contract, upstream: Contract) -> list[str]:
    problems = []
    for name in ("mode", "ordering", "score_kind", "model_calls"):
        if getattr(remote, name) != getattr(upstream, name):
            problems.append(f"{name} {getattr(upstream, name)!r} != {getattr(remote, name)!r}")
    if remote.coverage.claim is not upstream.coverage.claim:
        problems.append(f"coverage {upstream.coverage.claim.value} != {remote.coverage.claim.value}")
    problems += [f"query class {q.value} not served" for q in remote.query_classes if q not in upstream.query_classes]
    problems += [f"query part {p} not served" for p in remote.query_parts if p not in upstream.query_parts]
    for field, support in sorted(remote.filters.items()):
        theirs = upstream.filter_support(field)
        if theirs.support is not support.support or not set(support.ops) <= set(theirs.ops):
            problems.append(f"filter {field}: server has {theirs.support.value} {[o.value for o in theirs.ops]}")
    return problems


class RemoteAdapter(Adapter):
    """A ``race serve`` server's contracts, as ``remote.*`` contracts with egress ``remote``."""

    backend: ClassVar[str] = BACKEND

    def __init__(
        self,
        base_url: str,
        info: ServerInfo,
        upstream: dict[str, Contract],
        *,
        timeout: float,
        egress: ContractEgress = ContractEgress.REMOTE,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool: ClientPool | None = None,
    ) -> None:
        self.base_url = base_url
        self.timeout = timeout
        """Seconds the client waits to connect, for a free pooled connection, and between bytes."""
        self.egress = egress
        self._info = info
        self._upstream = upstream
        self._pool = pool if pool is not None else ClientPool(timeout=timeout, max_connections=max_connections)
        if egress is not ContractEgress.REMOTE:
            self.generated_contracts = tuple(c.model_copy(update={"egress": egress}) for c in self.contracts())
        self._pinned: str | None = None
        """The generation every answer must carry (a run's pinned adapter); ``None`` checks nothing."""

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return load_contracts_beside(__file__)

    @classmethod
    def connect(
        cls,
        base_url: str,
        *,
        timeout: float = 5.0,
        egress: ContractEgress = ContractEgress.REMOTE,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> Self:
        """Handshake with a server (blocking): read its contracts and check it backs ours.

        ``timeout`` (seconds), ``egress`` (the egress class of every contract this instance
        serves) and ``max_connections`` (its pool) belong to this instance alone. An
        unreachable server is ``BackendUnavailable``; one that does not serve a declared
        contract at a compatible version is a ``ContractError``.
        """
        if not timeout > 0:
            raise InputError(f"the client timeout must be positive seconds, not {timeout!r}", where="remote")
        if max_connections < 1:
            raise InputError(f"max_connections must be at least 1, not {max_connections}", where="remote")
        started = time.perf_counter()
        url = _base_url(base_url)
        pool = ClientPool(timeout=timeout, max_connections=max_connections)
        info = _fetch_info(pool, url)
        upstream = check_served(cls.contracts(), info.contracts, where=url)
        _log.debug("remote %s: handshake in %.1f ms", url, (time.perf_counter() - started) * 1e3)
        return cls(url, info, upstream, timeout=timeout, egress=egress, pool=pool)

    @property
    def pool(self) -> ClientPool:
        """This instance's HTTP clients (its pinned copies share them)."""
        return self._pool

    async def aclose(self) -> None:
        """Close this instance's clients and their connections; a later request opens new ones."""
        await self._pool.aclose()

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        raise InputError(
            "the remote backend is not built from a corpus; index locally and expose it with `race serve`",
            where=cls.backend,
        )

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        raise InputError(
            "the remote backend is not opened from an index directory; use RemoteAdapter.connect(base_url) "
            "or `race run PLAN --remote URL`",
            where=cls.backend,
        )

    @property
    def identity(self) -> str:
        return f"remote:{self._info.identity}"

    def generation(self) -> str:
        """The server's advertised generation, read fresh (blocking), or ``unknown`` when it
        cannot be read. A pinned adapter answers the generation it was pinned to."""
        if self._pinned is not None:
            return self._pinned
        try:
            return _fetch_info(self._pool, self.base_url).generation
        except BackendUnavailable:
            return UNKNOWN_GENERATION

    async def current_generation(self) -> str:
        """``generation()`` without blocking the event loop: one async ``GET /v1/contracts``."""
        if self._pinned is not None:
            return self._pinned
        url = self.base_url + CONTRACTS_PATH
        try:
            response = await self._pool.client().get(url)
            if response.status_code == 200:
                return _parse_info(response.content, where=url).generation
        except (httpx.HTTPError, BackendUnavailable):
            pass
        return UNKNOWN_GENERATION

    def pinned(self, generation: str) -> Adapter:
        """This server, every answer checked to carry ``generation``; with ``unknown``, every scan
        is refused (what was planned cannot be told from what a scan would read)."""
        held = copy.copy(self)
        held._pinned = generation
        return held

    def statistics(self) -> BackendStatistics:
        rows = sum(s.rows for s in self._info.statistics)
        counts: dict[str, dict[str, int]] = {}
        for stats in self._info.statistics:
            for field, values in stats.value_counts.items():
                for value, n in values.items():
                    counts.setdefault(field, {})[value] = counts.get(field, {}).get(value, 0) + n
        return BackendStatistics(backend=self.backend, rows=rows, value_counts=counts)

    # -- scans ------------------------------------------------------------------------------

    async def scan(self, request: ScanRequest) -> ScanResult:
        return self.decode(request, await self.fetch(request))

    def decode(self, request: ScanRequest, exchange: Exchange) -> ScanResult:
        return decode_exchange(request, exchange, expected_generation=self._pinned)

    async def fetch(self, request: ScanRequest) -> Exchange:
        """Send one request; the raw answer, or the ``BackendError`` for a transport failure."""
        if self._pinned == UNKNOWN_GENERATION:
            raise SnapshotMoved(
                "the server's generation could not be read when the run was planned, so no answer can be "
                "tied to the planned snapshot",
                where=request.rsc_id,
                planned=UNKNOWN_GENERATION,
                current=UNKNOWN_GENERATION,
            )
        upstream = self._upstream.get(request.rsc_id)
        if upstream is None:
            raise BackendUnavailable(f"this server backs no contract {request.rsc_id}", where=request.rsc_id)
        sent = upstream_request(request, upstream.ref, upstream.backend)
        url = self.base_url + SCAN_PATH
        headers = {"content-type": "application/json"}
        deadline = anyio.current_effective_deadline()
        if deadline != float("inf"):
            # The server stops working on a leg the client has already given up on.
            headers[DEADLINE_HEADER] = str(max(1, int((deadline - anyio.current_time()) * 1000)))
        body = sent.model_dump_json().encode()
        try:
            response = await self._pool.client().post(url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise BackendTimeout(
                f"{url}: no answer within the client timeout of {self.timeout:g} s ({type(exc).__name__})",
                where=request.rsc_id,
            ) from exc
        except httpx.RemoteProtocolError as exc:
            raise BackendUnavailable(
                f"{url}: connection closed before a complete response ({exc}); a partial response is never evidence",
                where=request.rsc_id,
            ) from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"{url}: {type(exc).__name__}: {exc}", where=request.rsc_id) from exc
        kept = tuple(sorted((k.lower(), v) for k, v in response.headers.items() if k.lower() in RETAINED_HEADERS))
        return Exchange(url=url, status=response.status_code, headers=kept, body=response.content)


def _base_url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"{text!r} is not an http(s) base URL like http://127.0.0.1:8765", where="remote")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _fetch_info(pool: ClientPool, base_url: str) -> ServerInfo:
    url = base_url + CONTRACTS_PATH
    try:
        response = pool.blocking().get(url)
    except httpx.TimeoutException as exc:
        raise BackendUnavailable(f"no answer within {pool.timeout:g} s", where=url) from exc
    except httpx.HTTPError as exc:
        raise BackendUnavailable(f"cannot reach the server: {type(exc).__name__}: {exc}", where=url) from exc
    if response.status_code != 200:
        raise BackendUnavailable(f"answered HTTP {response.status_code}", where=url)
    return _parse_info(response.content, where=url)
