"""A shard reached through a Ray actor: the index is opened, pinned and scanned in the actor.

``RayShard(kind, index_dir)`` starts one actor that opens ``kind.open(index_dir)`` (so the path
must be readable where the actor runs) and serves it as an adapter here: its contracts, corpus
schema and statistics are the actor's index's, a generation is read there, a pin holds the
snapshot in the actor, and a scan is one actor call. ``ShardedAdapter(name, [RayShard(...),
...])`` is a sharded instance over Ray, scattered and merged exactly as over local shards.

Faults stay at this edge: an exception in the actor reaches the caller as itself (an
``IndexMissingError`` when the directory has no index, ``SnapshotMoved`` for a snapshot the
actor cannot hold), and an actor that died or was killed, even mid-query, is
``BackendUnavailable``, which the sharded instance turns into ``shard_unavailable``.

Only code that asks for Ray shards imports this module, and only it imports Ray (``race[ray]``).
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, Self

import anyio
import ray

from backends.base import Adapter, Progress, RefusedSnapshot
from backends.ingest.corpus import Corpus
from backends.ingest.schema import CorpusSchema
from rsc import BackendStatistics, BackendUnavailable, Contract, InputError, ScanRequest, ScanResult

_HELD = 8
"""Pinned snapshots an actor keeps (one per run in flight)."""


class ShardActor:
    """The body of one Ray actor: one opened index of one adapter kind."""

    def __init__(self, kind: type[Adapter], index_dir: str) -> None:
        self.kind = kind
        self.index_dir = Path(index_dir)
        self.adapter: Adapter | None = None
        self.held: dict[str, Adapter] = {}

    def open(self) -> tuple[str, str, tuple[Contract, ...], CorpusSchema | None, BackendStatistics]:
        self.adapter = adapter = self.kind.open(self.index_dir)
        return adapter.backend, adapter.identity, adapter.index_contracts(), adapter.corpus_schema, adapter.statistics()

    def _adapter(self) -> Adapter:
        if self.adapter is None:
            raise BackendUnavailable("the shard actor has not opened its index", where=str(self.index_dir))
        return self.adapter

    def generation(self) -> str:
        return self._adapter().generation()

    def statistics(self, generation: str | None) -> BackendStatistics:
        held = self.held.get(generation) if generation is not None else None
        return (held or self._adapter()).statistics()

    def pin(self, generation: str) -> str | None:
        """Hold ``generation``; ``None`` when held, else the generation the index is at."""
        held = self._adapter().pinned(generation)
        if isinstance(held, RefusedSnapshot):
            return held.current
        self.held.pop(generation, None)
        self.held[generation] = held
        while len(self.held) > _HELD:
            self.held.pop(next(iter(self.held)))
        return None

    def scan(self, request: ScanRequest, generation: str | None) -> ScanResult:
        adapter = self._adapter()
        if generation is not None:
            held = self.held.get(generation)
            adapter = held if held is not None else adapter.pinned(generation)
        return anyio.run(adapter.scan, request)


_Actor: Any = ray.remote(num_cpus=0, max_restarts=0)(ShardActor)


def _unwrap(exc: BaseException, where: str) -> Exception:
    """The exception a Ray call stands for: the actor's own, or ``BackendUnavailable``."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            return cause
    if isinstance(exc, ray.exceptions.RayActorError):
        return BackendUnavailable(f"the shard actor died ({type(exc).__name__})", where=where)
    return BackendUnavailable(f"Ray call failed: {type(exc).__name__}: {exc}", where=where)


class RayShard(Adapter):
    """One index of ``kind`` opened and scanned in a Ray actor (``ray.init`` first)."""

    backend = "ray_shard"

    def __init__(self, kind: type[Adapter], index_dir: Path, *, timeout: float = 60.0) -> None:
        """Start the actor and open ``index_dir`` there; a missing index is the actor's
        ``IndexMissingError`` (bad input naming the directory). ``timeout`` bounds the blocking
        calls (open, generation, statistics); scans are bounded by their deadline."""
        if not ray.is_initialized():
            raise InputError("Ray is not initialized (ray.init) in this process", where=str(index_dir))
        self.kind = kind
        self.where = str(index_dir)
        self.timeout = timeout
        self.actor = _Actor.remote(kind, str(index_dir))
        try:
            backend, identity, contracts, schema, stats = ray.get(self.actor.open.remote(), timeout=timeout)
        except Exception as exc:
            ray.kill(self.actor)
            raise _unwrap(exc, self.where) from exc
        self.backend = backend  # type: ignore[misc]
        self._identity = str(identity)
        self.generated_contracts = contracts
        self.corpus_schema = schema
        self._stats: BackendStatistics = stats
        self._pinned: str | None = None

    def _get(self, ref: Any) -> Any:
        try:
            return ray.get(ref, timeout=self.timeout)
        except Exception as exc:
            raise _unwrap(exc, self.where) from exc

    async def _await(self, ref: Any) -> Any:
        try:
            return await ref
        except Exception as exc:
            raise _unwrap(exc, self.where) from exc

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return ()

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        raise InputError("a Ray shard serves an index built locally; build it with its kind", where=cls.backend)

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        raise InputError("a Ray shard is started with RayShard(kind, index_dir)", where=cls.backend)

    @property
    def identity(self) -> str:
        return self._identity

    def generation(self) -> str:
        if self._pinned is not None:
            return self._pinned
        return str(self._get(self.actor.generation.remote()))

    async def current_generation(self) -> str:
        if self._pinned is not None:
            return self._pinned
        return str(await self._await(self.actor.generation.remote()))

    def pinned(self, generation: str) -> Adapter:
        return self._held(generation, self._get(self.actor.pin.remote(generation)))

    async def pin(self, generation: str) -> Adapter:
        return self._held(generation, await self._await(self.actor.pin.remote(generation)))

    def _held(self, generation: str, refused: str | None) -> Adapter:
        if refused is not None:
            return RefusedSnapshot(self, planned=generation, current=refused, reason="is no longer the shard's state")
        held = copy.copy(self)
        held._pinned = generation
        return held

    def statistics(self) -> BackendStatistics:
        """The actor's statistics; the last ones read where the actor cannot answer."""
        with contextlib.suppress(BackendUnavailable):
            self._stats = self._get(self.actor.statistics.remote(self._pinned))
        return self._stats

    async def scan(self, request: ScanRequest) -> ScanResult:
        result = await self._await(self.actor.scan.remote(request, self._pinned))
        if not isinstance(result, ScanResult):
            raise BackendUnavailable(f"the shard actor answered {type(result).__name__}", where=self.where)
        return result

    def kill(self) -> None:
        """End the actor now, whatever it is doing (its scans in flight fail)."""
        ray.kill(self.actor)

    async def aclose(self) -> None:
        self.kill()
