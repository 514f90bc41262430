"""Pinning a run's backends to the snapshots its plan was made with (docs/invariants.md#generations-name-snapshots).

A plan is made with every backend's generation as read just before it; the run then reads
those snapshots and no others, whatever commits land while its legs are in flight. Each
backend the run reads is replaced, for this run only, by ``adapter.pin(generation)``:
tantivy holds one searcher, LanceDB checks the planned table version out, the graph keeps
its loaded snapshot, a remote checks the generation every answer carries. A snapshot that
cannot be pinned (gone, moved, or unknown) gives an adapter whose scans raise
``SnapshotMoved``, so those legs are ``snapshot_moved`` gaps naming both generations; a
receipt's hits therefore always carry the generations its fingerprints name.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from functools import partial

from backends.base import UNKNOWN_GENERATION, Adapter, RefusedSnapshot
from planner import Explain, scans
from race.run.detached import CallPool
from race.tracing import span
from rsc import BackendUnavailable, ScanRequest, ScanResult

LINEAGE_BACKEND = "graph"
"""The backend whose source-dependence answers the runtime reads beside the legs."""


def backends_read(explain: Explain, adapters: Collection[str]) -> frozenset[str]:
    """The backends a run of ``explain`` reads: those its scans name, and the lineage source.

    Only these are pinned; a backend the plan does not read costs the run nothing.
    """
    read = {scan.request.backend for scan in scans(explain.physical)} | {LINEAGE_BACKEND}
    return frozenset(name for name in adapters if name in read)


def modes_read(explain: Explain, adapters: Collection[str]) -> dict[str, frozenset[str]]:
    """The scan modes a run of ``explain`` asks of each backend it reads: what its set-up covers."""
    modes: dict[str, set[str]] = {name: set() for name in backends_read(explain, adapters)}
    for scan in scans(explain.physical):
        if scan.request.backend in modes:
            modes[scan.request.backend].add(scan.request.mode)
    return {name: frozenset(found) for name, found in sorted(modes.items())}


async def pin_snapshots(
    adapters: Mapping[str, Adapter],
    generations: Mapping[str, str],
    *,
    read: Collection[str],
    deadline: float,
    bound: float | None = None,
    pool: CallPool | None = None,
) -> dict[str, Adapter]:
    """``adapters`` with each one in ``read`` pinned to its planned generation, all at once, each
    within ``bound`` seconds and none past ``deadline`` (a ``time.monotonic`` instant; the run's
    plan deadline). A pin that does not answer in time is left behind in ``pool``
    (``race.run.detached``) and only that backend's legs are refused; the others are passed
    through as they are."""
    names = [name for name in adapters if name in read]
    limit = max(deadline - time.monotonic(), 0.0)
    if bound is not None:
        limit = min(limit, bound)
    calls = pool if pool is not None else CallPool()
    # A local index's pin (``pins_inline``: a stat or two) is made inline: a task costs more.
    inline = [name for name in names if adapters[name].pins_inline]
    pins = {
        name: partial(adapters[name].pin, generations.get(name, UNKNOWN_GENERATION))
        for name in names
        if name not in inline
    }
    settled: dict[str, tuple[bool, Adapter | BaseException | None]] = {}
    for name in inline:
        # With no time left nothing is pinned, as a task given no time would not be.
        planned = generations.get(name, UNKNOWN_GENERATION)
        settled[name] = _pin_inline(adapters[name], planned) if limit > 0.0 else (False, None)
    if pins:
        settled.update(await calls.settle(pins, limit))
    pinned: dict[str, Adapter] = {}
    for name, (answered, answer) in sorted(settled.items(), key=lambda pair: names.index(pair[0])):
        planned = generations.get(name, UNKNOWN_GENERATION)
        with span("race.pin", backend=name, generation=planned) as traced:
            if isinstance(answer, Exception):
                # An adapter's fault, of any type, is its legs' gap, never the run's failure.
                traced.fail(detail := f"{type(answer).__name__}: {answer}")
                pinned[name] = _PinFailed(adapters[name], planned=planned, detail=detail)
            elif answered and isinstance(answer, Adapter):
                pinned[name] = answer
            else:
                traced.fail(f"no answer within {limit * 1000.0:.0f} ms")
    out: dict[str, Adapter] = {}
    for name, adapter in adapters.items():
        if name not in read:
            out[name] = adapter
        elif name in pinned:
            out[name] = pinned[name]
        else:
            # Its pin did not answer in time; no leg may read it unpinned.
            planned = generations.get(name, UNKNOWN_GENERATION)
            out[name] = RefusedSnapshot(
                adapter, planned=planned, current=UNKNOWN_GENERATION, reason="was not pinned in time"
            )
    return out


def _pin_inline(adapter: Adapter, generation: str) -> tuple[bool, Adapter | BaseException | None]:
    try:
        return True, adapter.pinned(generation)
    except Exception as exc:  # the adapter's fault is its legs' gap, as from a task
        return True, exc


class _PinFailed(RefusedSnapshot):
    """A backend whose pinning raised: its scans fail as that backend error."""

    def __init__(self, inner: Adapter, *, planned: str, detail: str) -> None:
        super().__init__(inner, planned=planned, current=UNKNOWN_GENERATION, reason="could not be pinned")
        self.detail = detail

    async def scan(self, request: ScanRequest) -> ScanResult:
        raise BackendUnavailable(
            f"pinning the planned snapshot {self.planned} failed: {self.detail}", where=request.rsc_id
        )
