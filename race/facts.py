"""What an engine knows of its backends, as of a set of generations — their contracts (with the
recall calibrated on the very generation read), their statistics, their generations and models —
and their set-up (imports, opens, model weights, matrices), done once, off the event loop.

A long-lived engine reads a backend's calibration and statistics again when the generation a
run sees has moved past the one they were read at (an index rebuilt in place), so that it plans
and promises what a fresh engine over the same snapshots does.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio

from backends import Adapter
from planner import Statistics
from race.run.detached import CallPool
from race.run.legs import UNKNOWN_GENERATION
from race.state.learned import LearnedStatistics, PlanStatistics
from race.tracing import prepare, span
from rsc import Contract, calibrated

SETUP_TIMEOUT_S = 120.0
"""How long ``set_up`` waits for the backends' set-up before the run starts anyway (a backend
still setting up then opens within the run, and its legs say what became of them)."""


class BackendFacts:
    """Contracts, calibrations, statistics and generations of a fixed set of backends."""

    def __init__(
        self,
        adapters: Mapping[str, Adapter],
        *,
        extra_contracts: Sequence[Contract] = (),
        statistics: PlanStatistics | None = None,
    ) -> None:
        self.adapters = dict(sorted(adapters.items()))
        prepare()  # tracing's library, found now: never on the event loop
        self.call_pool = CallPool()
        """Where every run's backend calls go: the ones runs stopped waiting for, per backend."""
        self.compiled_queries = False
        """Whether set-up also compiles the query path of the models it loads (same bits, 0.65x
        the time a query, 0.6 to 1 s of set-up): for an engine that serves many queries."""
        self._contracts = tuple(
            sorted(
                [c for a in self.adapters.values() for c in a.index_contracts()] + list(extra_contracts),
                key=lambda c: (c.rsc_id, c.version),
            )
        )
        self._contract_refs = {f"{c.rsc_id}@{c.version}": c for c in self._contracts}
        # Recall measured on each backend's index, by the generation it was measured at; read
        # again when a backend's generation moves past it (an index rebuilt in place).
        self._calibrations = {n: found for n, a in self.adapters.items() if (found := a.calibrations()) is not None}
        self._calibrations_read: dict[str, str] = {}
        self._calibrated: dict[tuple[tuple[str, str], ...], tuple[Contract, ...]] = {}
        # (backend, modes) whose set-up (imports, opens, weights, matrices) is done.
        self._warmed: set[tuple[str, frozenset[str] | None]] = set()
        # Learned statistics are applied over the adapters' own; a ``Statistics`` replaces them.
        self._learned = statistics if isinstance(statistics, LearnedStatistics) else None
        statistics = None if isinstance(statistics, LearnedStatistics) else statistics
        self._statistics_fixed = statistics is not None
        # The statistics given, or what the adapters reported by the generations they were read
        # at; with its fingerprint.
        self._statistics_read: tuple[tuple[tuple[str, str], ...] | None, Statistics, str] | None = (
            (None, statistics, statistics.fingerprint) if statistics is not None else None
        )

    def contracts(self) -> tuple[Contract, ...]:
        return self._contracts

    def contracts_at(self, generations: Mapping[str, str]) -> tuple[Contract, ...]:
        """The contracts as they stand at ``generations``: an approximate contract carries the
        recall measured on its index only where that measurement is of this very generation."""
        self._refresh_calibrations(generations)
        current = tuple(sorted((n, g) for n, (g, _) in self._calibrations.items() if generations.get(n) == g))
        if not current:
            return self._contracts
        found = self._calibrated.get(current)
        if found is None:
            by_ref = {(name, c.rsc_id, c.rsc_version): c for name, _ in current for c in self._calibrations[name][1]}
            found = tuple(
                calibrated(c, by_ref[(c.backend, c.rsc_id, c.version)])
                if (c.backend, c.rsc_id, c.version) in by_ref
                else c
                for c in self._contracts
            )
            self._calibrated[current] = found
        return found

    def _refresh_calibrations(self, generations: Mapping[str, str]) -> None:
        """Read a backend's calibration file again when the run sees a generation that neither the
        kept calibration nor the last read was made at: a long-lived engine then promises what a
        fresh one over the same index promises."""
        for name, generation in generations.items():
            if generation == UNKNOWN_GENERATION or self._calibrations_read.get(name) == generation:
                continue
            kept = self._calibrations.get(name)
            if kept is not None and kept[0] == generation:
                continue
            self._calibrations_read[name] = generation
            try:
                found = self.adapters[name].calibrations()
            except Exception:
                found = None  # unreadable now: no recall is promised from it
            if found is None:
                self._calibrations.pop(name, None)
            else:
                self._calibrations[name] = found
            self._calibrated.clear()

    def generations(self) -> dict[str, str]:
        return {name: adapter.generation() for name, adapter in self.adapters.items()}

    async def current_generations(self, *, deadline: float | None = None, bound: float | None = None) -> dict[str, str]:
        """Every backend's generation, read fresh for each plan and run (I6), all at once, each
        within ``bound`` seconds and none past ``deadline`` (a ``time.monotonic`` instant). A
        generation that cannot be read in time, or whose read fails, is ``unknown``: never a cache
        hit, and that backend's legs say so. A read that does not answer is left behind
        (``race.run.detached``): one backend never holds another's read, nor the run.

        A generation read from local files the adapter holds open (``reads_generation_inline``:
        a ``stat`` or two) is read inline, with no task of its own: a task costs more than the
        read. Every other one (a remote's round trip) is its own bounded task, as above."""
        inline, reads = self._generation_reads()
        out: dict[str, str] = {}
        for name, adapter in inline:
            if deadline is not None and deadline <= time.monotonic():
                out[name] = UNKNOWN_GENERATION  # no time left to read anything
                continue
            try:
                found = adapter.generation()
            except Exception:
                found = UNKNOWN_GENERATION  # unreadable now: that backend's legs say so
            out[name] = found if isinstance(found, str) else UNKNOWN_GENERATION
        if reads:
            limits = [bound] if bound is not None else []
            if deadline is not None:
                limits.append(deadline - time.monotonic())
            found_all = await self.call_pool.settle(reads, max(min(limits), 0.0) if limits else None)
            for name, (answered, answer) in found_all.items():
                out[name] = answer if answered and isinstance(answer, str) else UNKNOWN_GENERATION
        return {name: out[name] for name in self.adapters}

    def _generation_reads(self) -> tuple[list[tuple[str, Adapter]], dict[str, Callable[[], Awaitable[str]]]]:
        """The adapters whose generation is read inline, and the reads that run as tasks."""
        inline: list[tuple[str, Adapter]] = []
        reads: dict[str, Callable[[], Awaitable[str]]] = {}
        for name, adapter in self.adapters.items():
            if adapter.reads_generation_inline:
                inline.append((name, adapter))
            else:
                reads[name] = adapter.current_generation
        return inline, reads

    def statistics(self, generations: Mapping[str, str] | None = None) -> Statistics:
        """The statistics plans are costed with: the ones given to the engine, or else what the
        adapters report, read again when a backend's generation differs from the ``generations``
        they were last read at. A long-lived engine then costs a plan as a fresh one over the
        same snapshots does, so both choose the same physical plan."""
        return self._statistics(generations)[1]

    def statistics_fingerprint(self, generations: Mapping[str, str] | None = None) -> str:
        return self._statistics(generations)[2]

    def _statistics(self, generations: Mapping[str, str] | None) -> tuple[object, Statistics, str]:
        key = tuple(sorted(generations.items())) if generations is not None else None
        known = self._statistics_read
        if known is not None and (self._statistics_fixed or key is None or known[0] == key):
            return known
        stats = Statistics(backends={n: a.statistics() for n, a in self.adapters.items()})
        stats = self._learned.apply(stats) if self._learned is not None else stats
        self._statistics_read = (key, stats, stats.fingerprint)
        return self._statistics_read

    def models(self) -> tuple[dict[str, str | int], ...]:
        """The identity (name, dims, weights sha256) of every model a backend of this engine runs."""
        out = [model for adapter in self.adapters.values() for model in adapter.models()]
        return tuple(sorted(out, key=lambda m: str(m.get("name", ""))))

    async def set_up_timed(self, needs: Mapping[str, frozenset[str] | None]) -> float:
        """``set_up``, and the seconds it took (0.0 when everything was already set up)."""
        started = time.monotonic()
        if all((n, m) in self._warmed or (n, None) in self._warmed for n, m in needs.items()):
            return 0.0
        await self.set_up(needs)
        return time.monotonic() - started

    async def set_up(self, needs: Mapping[str, frozenset[str] | None]) -> None:
        """Each backend's set-up for the scan modes in ``needs`` (every mode for ``None``), all at
        once, each on a worker thread, bounded by ``SETUP_TIMEOUT_S``; what is done is not done
        again. A failure is left for the legs to report, each as its own gap."""
        todo = [(n, m) for n, m in needs.items() if (n, m) not in self._warmed and (n, None) not in self._warmed]

        async def one(name: str, modes: frozenset[str] | None) -> None:
            with span("race.setup", backend=name, modes=sorted(modes) if modes is not None else ["all"]) as traced:
                try:
                    await anyio.to_thread.run_sync(self.adapters[name].warm, modes, abandon_on_cancel=True)
                except Exception as exc:
                    traced.fail(f"{type(exc).__name__}: {exc}")
                    return
            self._warmed.add((name, modes))

        with anyio.move_on_after(SETUP_TIMEOUT_S):
            async with anyio.create_task_group() as group:
                for name, modes in todo:
                    group.start_soon(one, name, modes)
            if self.compiled_queries:  # after the models load; never fails (the numpy path stays)
                from backends.models.embedding import compile_forward_passes

                await anyio.to_thread.run_sync(compile_forward_passes, abandon_on_cancel=True)
