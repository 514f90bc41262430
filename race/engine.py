"""The embedded engine: open an index, plan, run and replay, async with thin sync wrappers."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, Unpack, cast

import anyio

from backends import Adapter
from planner import Explain, LogicalPlan, PlanInput, plan_digest, plan_from_dict
from planner.logical import plan_from_input
from race.evidence.tools import EvidenceTools
from race.facts import SETUP_TIMEOUT_S
from race.indexing.bundled import ensure_bundled_index
from race.indexing.indexing import absent_contracts, corpus_root
from race.indexing.instances import connect_remotes as connect_remotes
from race.indexing.instances import index_adapters, open_catalog
from race.indexing.instances import known_contracts as known_contracts
from race.planning import Planning, RunClock
from race.portal import LoopThread
from race.receipt import Receipt
from race.run.clock import RunPhases, with_analysis
from race.run.executor import Executor, Lineage
from race.run.gc_pause import full_collections_wait
from race.run.legs import UNKNOWN_GENERATION
from race.run.roles import index_roles
from race.search import SearchOptions, plan_for_search
from race.state.cache import PlanCache, ResultCache
from race.state.learned import PlanStatistics, record_observations
from race.state.learned import load_statistics as load_statistics
from race.state.retain import RunRecorder
from race.state.snapshots import modes_read, pin_snapshots
from race.tracing import run_attributes, span
from rsc import Contract, EngineClosed, GapKind, InputError, most_specific

if TYPE_CHECKING:  # batches are run on use (``run_many``), not on every run's path
    from race.evaluation.batch import PlanFailure

# A receipt with a gap that depends on timing, on a backend's health or on a snapshot that
# moved under the run is never cached.
_TRANSIENT_GAPS = frozenset({GapKind.TIMEOUT, GapKind.CANCELLED, GapKind.BACKEND_ERROR, GapKind.SNAPSHOT_MOVED})
_log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_error(method: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """A failure inside a task group reaches the caller as the one error it stands for."""

    @wraps(method)
    async def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(*args, **kwargs)
        except BaseExceptionGroup as group:
            raise most_specific(group) from None

    return call


class Engine(Planning, EvidenceTools):
    """Plans and runs logical plans over the backends of one index directory."""

    absent: tuple[tuple[Contract, str], ...] = ()
    """Contracts the index was built without (a lexical cold start), each with the reason."""
    record_stats: Path | None = None
    """Where every run appends its scans' measurements (``race.state.learned``); runs are then analyzed."""
    corpus_root: str | None = None
    """The corpus the index was built from, as its manifest records it; receipts carry it."""

    def __init__(
        self,
        adapters: Mapping[str, Adapter],
        *,
        extra_contracts: Sequence[Contract] = (),
        statistics: PlanStatistics | None = None,
        result_cache: ResultCache | None = None,
        early_stop: bool = True,
    ) -> None:
        super().__init__(adapters, extra_contracts=extra_contracts, statistics=statistics)
        # Early stop (I9) where a union admits it; off, it is evaluated in full (the same top k).
        self.early_stop = early_stop
        self._warmed_plans: set[str] = set()
        self.plan_cache: PlanCache[Explain] = PlanCache()
        self.receipt_cache: PlanCache[Receipt] = PlanCache()
        self.result_cache = result_cache if result_cache is not None else ResultCache()
        # The loop every *_sync call runs on; stopped by close(), or when the engine is collected.
        self._portal = LoopThread()
        weakref.finalize(self, self._portal.stop)

    def clear_receipt_cache(self) -> None:
        self.receipt_cache = PlanCache()

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        index_dir: str | os.PathLike[str],
        *,
        statistics: PlanStatistics | None = None,
        record_stats: Path | None = None,
        cache_dir: Path | None = None,
        remotes: Sequence[str] = (),
        remote_timeout: float = 5.0,
        early_stop: bool = True,
        milvus: Sequence[Path] = (),
        compiled_queries: bool = False,
    ) -> Engine:
        """The local backends of ``index_dir``, a ``race serve`` server's contracts for each base URL
        in ``remotes`` (backend ``remote``; one server), and the Milvus collection in ``milvus``.
        ``compiled_queries``: set-up compiles the query embedding path (``BackendFacts``)."""
        index_dir = Path(index_dir)
        adapters = index_adapters(index_dir, remotes=remotes, remote_timeout=remote_timeout, milvus=milvus)
        engine = cls(
            adapters, statistics=statistics, result_cache=ResultCache(directory=cache_dir), early_stop=early_stop
        )
        engine.absent, engine.record_stats = absent_contracts(index_dir), record_stats
        engine.corpus_root, engine.compiled_queries = corpus_root(index_dir), compiled_queries
        return engine

    @classmethod
    def from_catalog(cls, catalog: str | os.PathLike[str], *, cache_dir: Path | None = None, **options: Any) -> Engine:
        """The named instances of a catalog file, ``race.catalog/1`` (``race.indexing.instances.open_catalog``)."""
        return cls(open_catalog(Path(catalog)), result_cache=ResultCache(directory=cache_dir), **options)

    async def aclose(self) -> None:
        """Close every instance's client (remote and Milvus connections): the engine is done. A
        run after it does its set-up again (connecting again) before its plan's clock starts."""
        for adapter in self.adapters.values():
            await adapter.aclose()
        self._warmed.clear()
        self._warmed_plans.clear()

    def close(self) -> None:
        """``aclose`` from synchronous code, then stop the loop the ``*_sync`` calls ran on: a
        ``*_sync`` call still waiting raises ``EngineClosed`` (``race.portal``)."""
        try:
            with contextlib.suppress(EngineClosed):  # another close stopped the loop, after its aclose
                self._portal.call(self.aclose)
        finally:
            self._portal.stop()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.aclose()
        finally:
            self._portal.stop()

    @classmethod
    def bundled(cls, cache_dir: Path | None = None) -> Engine:
        return cls.open(ensure_bundled_index(cache_dir))

    def lineage(self, adapters: Mapping[str, Adapter] | None = None) -> Lineage | None:
        """The graph's source-dependence answers (of ``adapters``, a run's pinned ones, if given)."""
        graph = (self.adapters if adapters is None else adapters).get("graph")
        if graph is not None and hasattr(graph, "origins") and hasattr(graph, "related"):
            return cast(Lineage, graph)
        return None

    # -- planning --------------------------------------------------------------------------

    @staticmethod
    def parse(plan: PlanInput, *, where: str = "plan") -> LogicalPlan:
        return plan_from_input(plan, where=where)

    @_one_error
    async def plan(self, plan: PlanInput, *, where: str = "plan") -> Explain:
        logical = self.parse(plan, where=where)
        deadline = time.monotonic() + logical.budget.deadline_ms / 1000.0
        generations = await self.current_generations(deadline=deadline)
        return self._plan(logical, generations, where)[0]

    # -- set-up ----------------------------------------------------------------------------

    async def warm(self, plan: PlanInput | None = None, *, where: str = "plan") -> float:
        """Do the set-up a plan needs (every backend's, for every mode, without one): library
        imports, opens of tables and indexes, model weights and matrices, all backends at once,
        each on a worker thread, bounded by ``SETUP_TIMEOUT_S``. ``run`` calls it before the
        plan's clock starts: set-up is never charged to a plan's deadline. Returns the seconds
        it took (0 when everything was already set up)."""
        started = time.monotonic()
        if plan is None:
            needs: dict[str, frozenset[str] | None] = dict.fromkeys(self.adapters)
        else:
            logical = self.parse(plan, where=where)
            digest = plan_digest(logical)
            if digest in self._warmed_plans:
                return 0.0
            generations = await self.current_generations(deadline=started + SETUP_TIMEOUT_S)
            # The first compile of a plan is CPU work (the run then finds it in the plan cache):
            # on a worker thread, so that the loop keeps serving whatever else it runs.
            explain = (await anyio.to_thread.run_sync(self._plan, logical, generations, where))[0]
            needs = dict(modes_read(explain, self.adapters))
            self._warmed_plans.add(digest)
        await self.set_up(needs)
        return time.monotonic() - started

    # -- running ---------------------------------------------------------------------------

    @_one_error
    async def run(
        self,
        plan: PlanInput,
        *,
        where: str = "plan",
        retain: Path | None = None,
        analyze: bool = False,
        cache: bool = True,
    ) -> Receipt:
        """Execute a plan. With ``retain``, every leg's response is kept as an artifact under
        that directory (bypassing the result cache) so that ``replay`` can reproduce the receipt.
        With ``analyze``, the plan runs (the receipt cache passed by) and ``operational.analysis``
        holds its estimates beside the run's actuals (``race.analysis``). ``cache=False`` reads and
        keeps nothing in the receipt and result caches.

        The deadline covers the whole run, planning included; the plan's set-up (imports, opens,
        model weights) is not charged to it (``race.planning``); full garbage collections wait
        while it runs (``race.run.gc_pause``). One ``race.run`` span."""
        with full_collections_wait(), span("race.run", where=where) as traced:
            receipt = await self._run(plan, where=where, retain=retain, analyze=analyze, cache=cache)
            if traced.recording:
                traced.set(**run_attributes(receipt))
        return receipt

    async def _run(
        self, plan: PlanInput, *, where: str, retain: Path | None, analyze: bool = False, cache: bool = True
    ) -> Receipt:
        # The plan deadline covers the whole run: reading generations, planning, every node (I17);
        # each generation read and pin within its own bound. Set-up alone is not charged to it.
        clock = RunClock(time.monotonic(), (logical := self.parse(plan, where=where)).budget.deadline_ms)
        phases, analyze = RunPhases(), analyze or self.record_stats is not None
        generations = await self.current_generations(deadline=clock.deadline, bound=clock.read_bound)
        explain, plan_hit = await self._plan_within(logical, generations, where, clock)
        phases.mark("plan")
        clock.setup_s = await self.set_up_timed(needs := modes_read(explain, self.adapters))
        phases.mark("setup")
        # The root is a physical node too: its result is cached under the plan fingerprint
        # (every contract, generation and caller generation) and the physical plan's.
        receipt_key = f"{explain.fingerprints.plan}/{explain.fingerprints.physical}/{int(self.early_stop)}"
        known = UNKNOWN_GENERATION not in generations.values() and cache
        if retain is None and known and not analyze:
            cached = self.receipt_cache.get(receipt_key)
            if cached is not None:
                _log.debug("run %s: receipt cache hit", where)
                operational = phases.operational(clock, plan_hit, "hit")
                return cached.model_copy(update={"operational": operational, "corpus": self.corpus_root})
        # Every leg, and the lineage, reads the snapshot the plan was made with: a commit that
        # lands mid-run cannot change what this run reads (docs/invariants.md#generations-name-snapshots).
        read = frozenset(needs)  # the backends the plan reads: ``backends_read``
        adapters = await pin_snapshots(
            self.adapters, generations, read=read, deadline=clock.deadline, bound=clock.read_bound, pool=self.call_pool
        )
        phases.mark("pins")
        recorder = RunRecorder(adapters, self.lineage(adapters), retain=retain)
        executor = Executor(
            plan=logical,
            explain=explain,
            adapters=recorder.adapters,
            generations=generations,
            cache=self.result_cache if retain is None and cache else None,
            lineage=recorder.relations,
            early_stop=self.early_stop,
            contracts=self._contract_refs,
            deadline=clock.legs_deadline(nodes := len(logical.obligations) + len(logical.operators)),
            roles=index_roles(self.adapters.values()),
            pool=self.call_pool,
            cut=clock.cut(nodes),
            end=clock.deadline,
        )
        root = await executor.run()
        phases.mark("legs")
        receipt = executor.receipt(root, models=(models := self.models()))
        receipt = recorder.finish(
            receipt,
            plan=logical,
            explain=explain,
            legs=executor.legs,
            generations=generations,
            models=models,
            early_stop=self.early_stop,
        )
        timed = executor.limited or any(g.kind in _TRANSIENT_GAPS for g in receipt.gaps)
        if retain is None and known and not timed:
            self.receipt_cache.put(receipt_key, receipt)
        phases.mark("receipt")
        still_running = self.call_pool.left_by_backend()
        receipt_cache: Literal["none", "miss"] = "none" if retain or analyze or not cache else "miss"
        operational = phases.operational(clock, plan_hit, receipt_cache, executor, still_running)
        if analyze:
            stats, contracts = self.statistics(generations), self.contracts_at(generations)
            operational = with_analysis(operational, explain, receipt, contracts, stats)
            await anyio.to_thread.run_sync(record_observations, self.record_stats, operational.analysis)
        receipt = receipt.model_copy(update={"operational": operational, "corpus": self.corpus_root})
        await recorder.commit(receipt)
        return receipt

    async def run_many(self, plans: Sequence[PlanInput], *, concurrency: int = 4) -> list[Receipt | PlanFailure]:
        """Every plan's receipt (the same normalized bytes as ``run``) or its failure, in the
        order given, ``concurrency`` plans at once; one plan's failure never stops another."""
        from race.evaluation.batch import run_many

        return await run_many(self, plans, concurrency=concurrency)

    async def evaluate(self, queries: Any, judgments: Any, **options: Any) -> Any:
        """Strategies scored against graded judgments (``race.evaluation.streaming.evaluate``)."""
        from race.evaluation.streaming import evaluate

        return await evaluate(self, queries, judgments, **options)

    @_one_error
    async def replay(self, receipt: Receipt | Path, retained: Path) -> Receipt:
        """Re-execute a retained run's recorded physical plan from its artifacts only (I8): no
        network, no index, no result cache. Fails closed (``ReplayError``) on a missing or
        altered artifact, or if the replayed normalized receipt differs from the recorded one."""
        from race.state.replay import ReplaySession, load_receipt

        phases = RunPhases()
        recorded = load_receipt(receipt) if isinstance(receipt, Path) else receipt
        session = await anyio.to_thread.run_sync(ReplaySession.open, recorded, retained)
        executor = Executor(
            plan=session.plan,
            explain=session.explain,
            adapters=session.adapters(),
            generations=session.generations,
            cache=None,
            lineage=session.relations(),
            early_stop=session.early_stop,
            contracts=self._contract_refs,
            roles=recorded.roles,
        )
        root = await executor.run()
        replayed = session.finish(executor.receipt(root, models=session.models))
        operational = phases.replayed(executor, len(session.used))
        return replayed.model_copy(update={"operational": operational, "corpus": recorded.corpus})

    # -- one-line search --------------------------------------------------------------------

    def plan_for_search(self, text: str, **options: Unpack[SearchOptions]) -> LogicalPlan:
        """The one-obligation plan ``search`` runs (``race.search.plan_for_search``); ``index``
        limits it to one backend or catalog instance's contracts."""
        index = options.get("index")
        allow: tuple[str, ...] = ()
        if index is not None:
            adapter = self.adapters.get(index)
            if adapter is None:
                raise InputError(f"no backend or instance {index!r} (known: {', '.join(self.adapters)})", where="index")
            allow = tuple(sorted({c.rsc_id for c in adapter.index_contracts()}))
        found = plan_for_search(
            text,
            k=options.get("k", 10),
            where=options.get("where"),
            strategy=options.get("strategy"),
            kind=options.get("kind", "seek_support"),
            allow_contracts=allow,
        )
        return plan_from_dict(found, where="search")

    async def search(self, text: str, **options: Unpack[SearchOptions]) -> Receipt:
        """Search ``text`` (``k``, ``where``, ``strategy``, ``kind``, ``index``: ``SearchOptions``)
        and return the receipt: ``run(plan_for_search(...))``."""
        return await self.run(self.plan_for_search(text, **options), where="search")

    def search_sync(self, text: str, **options: Unpack[SearchOptions]) -> Receipt:
        return self._portal.call(lambda: self.search(text, **options))

    # -- sync wrappers ---------------------------------------------------------------------

    def plan_sync(self, plan: PlanInput, *, where: str = "plan") -> Explain:
        return self._portal.call(lambda: self.plan(plan, where=where))

    def run_sync(
        self, plan: PlanInput, *, where: str = "plan", retain: Path | None = None, analyze: bool = False
    ) -> Receipt:
        return self._portal.call(lambda: self.run(plan, where=where, retain=retain, analyze=analyze))

    def replay_sync(self, receipt: Receipt | Path, retained: Path) -> Receipt:
        return self._portal.call(lambda: self.replay(receipt, retained))

    def run_many_sync(self, plans: Sequence[PlanInput], *, concurrency: int = 4) -> list[Receipt | PlanFailure]:
        return self._portal.call(lambda: self.run_many(plans, concurrency=concurrency))
