"""A sharded instance: N adapters of one kind (tantivy indexes, LanceDB tables) behind one name.

``ShardedAdapter(name, shards)`` serves the shards' contracts as the contracts of one backend
``name`` (``tantivy.bm25`` of the shards is ``<name>.tantivy.bm25`` here, as for any named
instance, ``backends.named``; an instance named after its kind, ``tantivy``, keeps the kind's
own ids and stands in for that backend) and answers a scan by a
scatter to every shard at once and an exact top-k merge (``backends.sharding.scan``): each
shard returns its own exact top-k, and the first k of their union in the contract's order
(ties by evidence key, as everywhere in RACE) is the instance's top-k.

Scores. Vector distances do not depend on the other rows of a shard, so a sharded exact vector
scan answers exactly what one table of the same rows would. BM25 does: a term's IDF and the
average field length are each shard's own. A sharded BM25 contract therefore ranks by
per-shard BM25 (what Elasticsearch's ``query_then_fetch`` does), and says so in its
description: its top-k is the exact top-k of the per-shard scores, not of one index's BM25.

Generations. The instance's generation names every shard's, in shard order
(``sharded(s0=<gen>; s1=<gen>)``), so each shard's snapshot is in every fingerprint and in the
explain's generation line. Pinning pins each shard at its own planned generation; a shard that
cannot be pinned fails only its own part of a scan.

Coverage. A shard that fails, times out or cannot be read leaves its documents unsearched: the
answer is the exact merge of the shards that answered, with a ``shard_unavailable`` gap per
missing shard whose ``covered_fraction`` is chunks searched / chunks in the instance (the
shards' row counts as read when the instance was opened or pinned), beside a gap of the
failure's own kind (``timeout``, ``backend_error``, ``snapshot_moved``) so no cache keeps it.

Construction. ``ShardedAdapter(name, shards)`` takes opened adapters (``labels`` names them,
``s0``, ``s1``, ... by default); ``ShardedAdapter.open_dirs(name, kind, dirs)`` opens one index
directory per shard, and a directory without an index is bad input naming it: the catalog that
declared it is wrong. A shard that disappears after opening is ``shard_unavailable``.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Self

import anyio

from backends.base import UNKNOWN_GENERATION, Adapter, Progress, RefusedSnapshot, blocking
from backends.ingest.corpus import Corpus
from backends.models.queries import QueryVectors
from backends.sharding.scan import SHARD_SHARE, Shard, scatter
from rsc import (
    BackendStatistics,
    BackendUnavailable,
    Contract,
    CoverageClaim,
    InputError,
    ScanRequest,
    ScanResult,
    fingerprint,
)

_NAME: Final = re.compile(r"^[a-z][a-z0-9_]*$")
_LABEL: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_MEMO: Final = 64
"""Generations remembered (instance generation -> each shard's) for pinning what was planned."""


def combine(labels: Sequence[str], generations: Sequence[str]) -> str:
    """The instance generation: every shard's label and generation, in shard order."""
    return "sharded(" + "; ".join(f"{label}={gen}" for label, gen in zip(labels, generations, strict=True)) + ")"


class _Unreadable(RefusedSnapshot):
    """A shard whose generation could not be read when the run was planned: its part is refused."""


class ShardedAdapter(Adapter):
    """One backend ``name`` over ``shards``, adapters of one kind that each hold part of the rows."""

    backend = "sharded"

    def __init__(
        self,
        name: str,
        shards: Sequence[Adapter],
        *,
        labels: Sequence[str] | None = None,
        shard_share: float = SHARD_SHARE,
    ) -> None:
        """``name``: the instance's backend name (``[a-z][a-z0-9_]*``), the prefix of its contract
        ids. ``shards``: opened adapters of one backend kind, in a fixed order. ``labels``: one
        name per shard (default ``s0``, ``s1``, ...). ``shard_share``: the part of a scan's
        remaining deadline each shard gets, so that a late shard leaves time to merge the others.
        Every fault in the arguments is an ``InputError`` naming the instance."""
        where = f"instance {name!r}"
        if not _NAME.match(name):
            raise InputError(
                "an instance name is lowercase letters, digits and '_', starting with a letter", where=where
            )
        if not shards:
            raise InputError("a sharded instance needs at least one shard", where=where)
        kinds = sorted({s.backend for s in shards})
        if len(kinds) != 1:
            raise InputError(f"the shards are of different backends {kinds}; a sharded instance has one", where=where)
        names = list(labels) if labels is not None else [f"s{i}" for i in range(len(shards))]
        if len(names) != len(shards) or len(set(names)) != len(names) or not all(_LABEL.match(n) for n in names):
            raise InputError(f"shard labels {names} must be unique names, one per shard", where=where)
        if not 0.0 < shard_share < 1.0:
            raise InputError(f"shard_share {shard_share} must lie strictly between 0 and 1", where=where)
        self.backend = name  # type: ignore[misc]
        self.kind = kinds[0]
        self.labels = tuple(names)
        self.shard_share = shard_share
        self._shards = tuple(shards)
        self._contracts, self._inner_ids = _contracts(name, self.kind, self.labels, shards)
        self.corpus_schema = shards[0].corpus_schema
        _one_query_embedding(shards)
        self._stats = [s.statistics() for s in shards]
        self._rows = tuple(stats.rows for stats in self._stats)
        self._pinned_generation: str | None = None
        self._memo: dict[str, tuple[str, ...]] = {}
        self._memo_lock = threading.Lock()

    @classmethod
    def open_dirs(
        cls, name: str, kind: type[Adapter], dirs: Sequence[Path], *, labels: Sequence[str] | None = None
    ) -> ShardedAdapter:
        """Each of ``dirs`` opened as an index of ``kind``; a missing index is bad input naming it."""
        return cls(name, [kind.open(d) for d in dirs], labels=labels)

    # -- the Adapter API ----------------------------------------------------------------------

    @property
    def shards(self) -> tuple[Adapter, ...]:
        return self._shards

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return ()

    def index_contracts(self) -> tuple[Contract, ...]:
        return self._contracts

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        raise InputError("a sharded instance is not built as one index; build each shard", where=cls.backend)

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        raise InputError("a sharded instance is opened from its shards (ShardedAdapter.open_dirs)", where=cls.backend)

    @property
    def identity(self) -> str:
        return f"sharded:{self.backend}[" + ", ".join(f"{lb}={s.identity}" for lb, s in self._each()) + "]"

    def generation(self) -> str:
        if self._pinned_generation is not None:
            return self._pinned_generation
        return self._remember(tuple(_read(s) for s in self._shards))

    async def current_generation(self) -> str:
        if self._pinned_generation is not None:
            return self._pinned_generation
        found = [UNKNOWN_GENERATION] * len(self._shards)

        async def one(i: int) -> None:
            try:
                found[i] = await self._shards[i].current_generation()
            except Exception:
                found[i] = UNKNOWN_GENERATION

        async with anyio.create_task_group() as tg:
            for i in range(len(self._shards)):
                tg.start_soon(one, i)
        return self._remember(tuple(found))

    def shard_generations(self, generation: str) -> tuple[str, ...] | None:
        """Each shard's generation in ``generation`` (one this instance reported), else ``None``."""
        with self._memo_lock:
            return self._memo.get(generation)

    def pinned(self, generation: str) -> Adapter:
        planned = self._planned(generation)
        if isinstance(planned, Adapter):
            return planned
        held = [_pin_one(s, g) for s, g in zip(self._shards, planned, strict=True)]
        return self._held(generation, held, [_rows(h, n) for h, n in zip(held, self._rows, strict=True)])

    async def pin(self, generation: str) -> Adapter:
        planned = self._planned(generation)
        if isinstance(planned, Adapter):
            return planned
        held: list[Adapter] = list(self._shards)
        rows = list(self._rows)

        async def one(i: int) -> None:
            shard, gen = self._shards[i], planned[i]
            if gen == UNKNOWN_GENERATION:
                held[i] = _pin_one(shard, gen)
                return
            try:
                held[i] = await shard.pin(gen)
            except Exception as exc:
                held[i] = RefusedSnapshot(shard, planned=gen, current=UNKNOWN_GENERATION, reason=_why(exc))
                return
            rows[i] = await blocking(_rows, held[i], rows[i])

        async with anyio.create_task_group() as tg:
            for i in range(len(self._shards)):
                tg.start_soon(one, i)
        return self._held(generation, held, rows)

    def statistics(self) -> BackendStatistics:
        """Rows and value counts summed over the shards; a latency is the slowest shard's. A shard
        that cannot be read counts as it last could (they only choose a plan, I2)."""
        rows = 0
        counts: dict[str, dict[str, int]] = {}
        latency: dict[str, float] = {}
        for i, shard in enumerate(self._shards):
            try:
                self._stats[i] = stats = shard.statistics()
            except Exception:
                stats = self._stats[i]
            rows += stats.rows
            for field, values in stats.value_counts.items():
                into = counts.setdefault(field, {})
                for value, n in values.items():
                    into[value] = into.get(value, 0) + n
            for key, ms in stats.latency_ms.items():
                latency[key] = max(latency.get(key, 0.0), ms)
        value_counts = {f: dict(sorted(v.items())) for f, v in sorted(counts.items())}
        return BackendStatistics(
            backend=self.backend, rows=rows, value_counts=value_counts, latency_ms=dict(sorted(latency.items()))
        )

    def models(self) -> tuple[dict[str, str | int], ...]:
        seen: dict[str, dict[str, str | int]] = {}
        for shard in self._shards:
            for model in shard.models():
                seen.setdefault(repr(sorted(model.items())), model)
        return tuple(seen[k] for k in sorted(seen))

    async def scan(self, request: ScanRequest) -> ScanResult:
        inner_id = self._inner_ids.get(request.rsc_id)
        contract = next((c for c in self._contracts if c.rsc_id == request.rsc_id), None)
        if inner_id is None or contract is None:
            raise BackendUnavailable(
                f"instance {self.backend!r} serves no contract {request.rsc_id}", where=request.rsc_id
            )
        shards = [Shard(lb, s, n) for (lb, s), n in zip(self._each(), self._rows, strict=True)]
        result = await scatter(
            request,
            shards,
            inner=request.model_copy(update={"rsc_id": inner_id, "backend": self.kind}),
            ordering=contract.ordering,
            share=self.shard_share,
            generation=self._instance_generation,
            exhaustive_set=contract.coverage.claim is CoverageClaim.EXHAUSTIVE_SET,
        )
        return result.result

    def _instance_generation(self, answered: Sequence[str]) -> str:
        """The pinned generation, or (unpinned) the one the shards' answers name."""
        return self._pinned_generation or combine(self.labels, answered)

    def forget_query_vectors(self) -> None:
        """Drop the shards' kept query vectors (benchmarks compare cold embedding)."""
        for shard in self._shards:
            forget = getattr(shard, "forget_query_vectors", None)
            if callable(forget):
                forget()

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()

    # -- helpers ------------------------------------------------------------------------------

    def _each(self) -> tuple[tuple[str, Adapter], ...]:
        return tuple(zip(self.labels, self._shards, strict=True))

    def _remember(self, generations: tuple[str, ...]) -> str:
        combined = combine(self.labels, generations)
        with self._memo_lock:
            self._memo.pop(combined, None)
            self._memo[combined] = generations
            while len(self._memo) > _MEMO:
                self._memo.pop(next(iter(self._memo)))
        return combined

    def _planned(self, generation: str) -> tuple[str, ...] | Adapter:
        """Each shard's planned generation, or the refusal of a generation this instance never had."""
        planned = self.shard_generations(generation)
        if planned is not None:
            return planned
        current = self.generation()
        if current == generation:
            planned = self.shard_generations(current)
            assert planned is not None
            return planned
        return RefusedSnapshot(self, planned=generation, current=current, reason="is not a state of this instance")

    def _held(self, generation: str, shards: Sequence[Adapter], rows: Sequence[int]) -> ShardedAdapter:
        held = copy.copy(self)
        held._shards = tuple(shards)
        held._rows = tuple(rows)
        held._stats = list(self._stats)
        held._pinned_generation = generation
        return held


def _contracts(
    name: str, kind: str, labels: Sequence[str], shards: Sequence[Adapter]
) -> tuple[tuple[Contract, ...], dict[str, str]]:
    """The shards' contracts (one set, the same on every shard) as this instance's, and for each
    of its contract ids the shard contract id a scan is sent to."""
    first = {c.rsc_id: c for c in shards[0].index_contracts()}
    for label, shard in zip(labels[1:], shards[1:], strict=True):
        other = {c.rsc_id: c.model_copy(update={"calibration": None}) for c in shard.index_contracts()}
        mine = {i: c.model_copy(update={"calibration": None}) for i, c in first.items()}
        if other != mine:
            differ = sorted(set(other) ^ set(mine)) or sorted(i for i in mine if mine[i] != other[i])
            raise InputError(f"shard {label} serves other contracts than shard {labels[0]} ({differ})", where=name)
    out: list[Contract] = []
    inner: dict[str, str] = {}
    for rsc_id, contract in sorted(first.items()):
        # An instance named after its kind stands in for that backend: its ids are the kind's own.
        own = rsc_id if name == kind else f"{name}.{rsc_id}"
        note = (
            f" Sharded instance {name!r}: {len(shards)} {kind} shards ({', '.join(labels)}) scanned at once, their "
            "top-k merged exactly (ties by evidence key); a shard that does not answer is a shard_unavailable gap "
            "with the fraction of the instance's chunks searched."
        )
        if contract.mode == "bm25":
            note += (
                " Scores are per-shard BM25: each shard's own IDF and average field length, so the top-k is the "
                "exact top-k of the shards' scores, not the BM25 of one index over all rows."
            )
        if contract.calibration is not None:
            note += " Recall calibrated on one shard does not carry over: this contract carries none."
        out.append(
            contract.model_copy(
                update={"rsc_id": own, "backend": name, "description": contract.description + note, "calibration": None}
            )
        )
        inner[own] = rsc_id
    return tuple(out), inner


def _one_query_embedding(shards: Sequence[Adapter]) -> None:
    """Vector shards built with one model embed a query once for the whole instance: they share
    the first shard's query-vector cache (``backends.models.queries.QueryVectors``; concurrent shards
    wait for one embedding), so a query is one model call, not one per shard (I10). Shards of
    other kinds, wrapped shards and shards built with different models are left as they are."""
    caches = [vars(s).get("_queries") for s in shards]
    first = caches[0]
    if len(shards) < 2 or not isinstance(first, QueryVectors) or not all(isinstance(c, QueryVectors) for c in caches):
        return
    models = [getattr(s, "embedder_identity", None) for s in shards]
    if any(m is None for m in models) or len({fingerprint(m) for m in models}) != 1:
        return
    for shard in shards[1:]:
        vars(shard)["_queries"] = first


def _read(shard: Adapter) -> str:
    try:
        return shard.generation()
    except Exception:
        return UNKNOWN_GENERATION


def _why(exc: BaseException) -> str:
    return f"could not be pinned ({type(exc).__name__}: {str(exc).strip() or 'no message'})"


def _pin_one(shard: Adapter, generation: str) -> Adapter:
    if generation == UNKNOWN_GENERATION:
        return _Unreadable(shard, planned=generation, current=generation, reason="could not be read when planned")
    try:
        return shard.pinned(generation)
    except Exception as exc:
        return RefusedSnapshot(shard, planned=generation, current=UNKNOWN_GENERATION, reason=_why(exc))


def _rows(shard: Adapter, known: int) -> int:
    """The shard's row count at its pinned snapshot, or ``known`` where it cannot be read."""
    if isinstance(shard, RefusedSnapshot):
        return known
    try:
        return shard.statistics().rows
    except Exception:
        return known
