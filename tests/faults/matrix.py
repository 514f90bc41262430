"""The fault matrix: which fault is injected into which leg of which plan, and what the
executor must make of it.

A case is (fixture plan, obligation, backend, fault). Plans under ``fixtures/plans/corpus2/``
run over an index of the second fixture corpus (fixtures/corpus2: other fields, another
schema, its generated contracts); every other plan over the bundled corpus's. The backend is the one the chosen
physical plan really sends that obligation's leg to (``run_case`` checks it against
``planner.scans(explain.physical)`` and refuses a case that names another), so a fault
always lands on a leg that runs. The uncooperative faults (``injector.UNCOOPERATIVE``: a
plain thread hop, a C call holding its thread, a client that swallows cancellation) run on
the first faulted leg of every plan. A timing fault runs with a small budget (``NORMAL``:
plan deadline 2000 ms, which also covers planning and every node, leg deadline 300 ms;
``TIGHT``: the plan deadline, 500 ms, comes before the leg's own), so a hang costs the suite
a fraction of a second, not its patience. An error or a malformed answer runs with deadlines
far above any run's need (``ROOMY``), so that on a busy machine only the injected fault,
never a slow leg, can end that leg.

What every case must show (docs/invariants.md: I3, I5, I7, I17 and "Malformed answers"):

- ``engine.run`` returns a receipt: no exception of any type escapes, and it returns
  within ``deadline_ms + 100 ms`` even when a worker thread never comes back; plus, on a
  busy machine, the largest lag of the event loop measured during that same run
  (tests/loop_lag.py): a late wake-up of the loop is the machine's, not the engine's.
- An exception from the adapter, of any type, in the coroutine or in its worker thread,
  is a ``backend_error`` gap on the obligation whose leg failed, naming that backend, the
  exception's type and its message; the obligation is ``unsatisfied`` when that leg was
  its only source and ``partial`` when it is a hybrid whose other leg answered.
- A leg that does not answer in time is a ``timeout`` gap (``cancelled`` when the plan
  deadline cut it first) on that obligation, with the same statuses, and nothing the late
  leg returned reaches the evidence.
- A malformed answer loses only its bad hits: every other hit of that answer stays in the
  evidence; a ``backend_error`` gap on the obligation counts the dropped hits and says why;
  the obligation is ``partial``.
- Operators pass the fault on honestly: no operator above the faulty node is ``satisfied``
  and none is better covered than it, up to a ``cascade`` or ``fallback`` whose next stage
  answered instead (which it must have run: a failed stage is never sufficient, and the
  fallback's receipt shows the failed stage's gap).

Faults on the deeper reads of a score-sum union (``nth_call`` on ``early_stop_union.json``)
are the union's: its gap names the union node, and the union is not ``satisfied``.

``python -m tests.faults.matrix [--out PATH.json] [--index DIR]`` runs every case against a
live ``race serve`` for the remote legs and prints (and writes, JSON plus a markdown table
beside it) the counts: faults injected, named gaps, silent losses, overruns, hangs and runs
without a receipt.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from backends import Adapter
from planner import Explain, HybridNode, LogicalPlan, OperatorNode, ScanNode, plan_from_dict, scans, walk
from race.engine import Engine
from race.receipt import Receipt
from rsc import BackendUnavailable, GapKind, Hit, ObligationStatus, SearchCoverage
from tests.conftest import FIXTURES, load_plan
from tests.faults.injector import (
    REASON_WORDS,
    UNCOOPERATIVE,
    Fault,
    FaultyAdapter,
    Injection,
    delay,
    duplicate_hits,
    faulty_adapters,
    hang_async,
    hang_thread,
    inf_score,
    late_answer,
    nan_score,
    negative_score,
    nth_call,
    out_of_filter,
    raise_task,
    raise_thread,
    truncated_custody,
)
from tests.loop_lag import LoopLag

SLACK_MS = 100.0
"""How far past the plan deadline a run may return (docs/invariants.md: I7, I17)."""
WATCHDOG_S = 10.0
"""A run still going this long after its plan deadline is a hang: the suite cuts it. (A run
that waited out a ``HANG_S`` hang ends before that, and is an overrun.)"""
BASELINE_BUDGET = {"deadline_ms": 300_000, "leg_timeout_ms": 120_000}
"""The fault-free run is the reference, not a timing check: no leg of it may time out."""


@dataclass(frozen=True)
class Deadlines:
    deadline_ms: int
    leg_timeout_ms: int

    @property
    def plan_bound(self) -> bool:
        """Whether the plan deadline passes before a leg's own deadline."""
        return self.leg_timeout_ms >= self.deadline_ms


NORMAL = Deadlines(deadline_ms=2000, leg_timeout_ms=300)
TIGHT = Deadlines(deadline_ms=500, leg_timeout_ms=2000)
ROOMY = Deadlines(deadline_ms=300_000, leg_timeout_ms=120_000)
"""For an error or a malformed answer: what is checked is the gap the fault makes, and a leg
slowed by a busy machine must not end first as a ``timeout``."""

LATE_S = 0.45
"""A late answer comes 150 ms after the NORMAL leg deadline; a delay, 300 ms after."""
DELAY_S = 0.6


@dataclass(frozen=True)
class Case:
    plan: str
    """A file under fixtures/plans/."""
    obligation: str
    backend: str
    fault: Fault
    deadlines: Deadlines = NORMAL
    target: str | None = None
    """The node the gap must name, when it is not the obligation (a score-sum union's own reads)."""

    @property
    def node(self) -> str:
        return self.target or self.obligation

    @property
    def needs_server(self) -> bool:
        return self.backend == "remote" or Path(self.plan).name.startswith("remote")

    @property
    def corpus(self) -> str:
        """The fixture corpus whose index the plan runs over: ``corpus2`` or ``bundled``."""
        return "corpus2" if self.plan.startswith("corpus2/") else "bundled"

    @property
    def id(self) -> str:
        tail = ":tight-deadline" if self.deadlines == TIGHT else ""
        head = "corpus2/" if self.corpus == "corpus2" else ""
        return f"{head}{Path(self.plan).stem}:{self.obligation}@{self.backend}:{self.fault.name}{tail}"


# -- the matrix -----------------------------------------------------------------------------

RUNTIME = RuntimeError("injected runtime failure")
MISSING = KeyError("injected missing shard")
BAD_VALUE = ValueError("injected bad value")
ZERO = ZeroDivisionError("injected division by zero")
OUTAGE = BackendUnavailable("injected outage", where="fault-injector")
EXCEPTIONS: tuple[Exception, ...] = (RUNTIME, MISSING, BAD_VALUE, ZERO, OUTAGE)

EVERY_ERROR: tuple[Fault, ...] = (*(raise_task(e) for e in EXCEPTIONS), *(raise_thread(e) for e in EXCEPTIONS))
EVERY_TIMING: tuple[Fault, ...] = (delay(DELAY_S), hang_async(), hang_thread(), late_answer(LATE_S))
EVERY_MALFORMED: tuple[Fault, ...] = (
    nan_score(),
    inf_score(),
    negative_score(),
    out_of_filter(),
    duplicate_hits(),
    truncated_custody(),
)
WITHOUT_FILTERS = tuple(f for f in EVERY_MALFORMED if f.kind != "out_of_filter")

_LEGS: tuple[tuple[str, str, str, Sequence[Fault]], ...] = (
    # operators_lexical.json: intersect, refine, oppose and freshen under one union, all BM25.
    (
        "operators_lexical.json",
        "stall-incident",  # read by both the intersect and the refine
        "tantivy",
        (
            raise_task(MISSING),
            raise_thread(BAD_VALUE),
            hang_async(),
            late_answer(LATE_S),
            nan_score(),
            duplicate_hits(),
            truncated_custody(),
        ),
    ),
    (
        "operators_lexical.json",
        "stall-official",
        "tantivy",
        (raise_task(ZERO), hang_thread(), out_of_filter(), negative_score()),
    ),
    ("operators_lexical.json", "fsync-claim", "tantivy", (raise_task(RUNTIME), delay(DELAY_S), inf_score())),
    (
        "operators_lexical.json",
        "fsync-refute",
        "tantivy",
        (raise_thread(MISSING), hang_thread(), negative_score(), duplicate_hits()),
    ),
    (
        "operators_lexical.json",
        "old-defaults",
        "tantivy",
        (raise_task(OUTAGE), late_answer(LATE_S), truncated_custody(), nan_score()),
    ),
    # showcase.json: union, oppose (over a hybrid refutation), corroborate; all three local backends.
    (
        "showcase.json",
        "cve-id",
        "tantivy",
        (raise_task(BAD_VALUE), hang_async(), duplicate_hits(), truncated_custody(), inf_score()),
    ),
    (
        "showcase.json",
        "fixed-release",
        "tantivy",
        (raise_thread(ZERO), delay(DELAY_S), out_of_filter(), nan_score()),
    ),
    ("showcase.json", "tls-defeater", "tantivy", (raise_task(RUNTIME), hang_thread(), negative_score())),
    (
        "showcase.json",
        "tls-defeater",
        "lancedb",
        (raise_thread(OUTAGE), late_answer(LATE_S), inf_score(), duplicate_hits()),
    ),
    ("showcase.json", "memory-reports", "lancedb", (*EVERY_ERROR, *EVERY_TIMING, *EVERY_MALFORMED)),
    ("showcase.json", "python-deps", "graph", (*EVERY_ERROR, *EVERY_TIMING, *WITHOUT_FILTERS)),
    # A graph traversal with a pushed filter, under a refine that only reorders.
    (
        "faults/graph_filtered.json",
        "official-neighbours",
        "graph",
        (raise_task(MISSING), hang_thread(), out_of_filter(), negative_score(), duplicate_hits()),
    ),
    ("dependency_chain.json", "deps", "graph", (raise_thread(ZERO), late_answer(LATE_S), truncated_custody())),
    # cascade: a failed or short stage is never sufficient, so the next one runs.
    (
        "cascade_lexical.json",
        "advisories",
        "tantivy",
        (raise_task(MISSING), hang_async(), out_of_filter(), duplicate_hits()),
    ),
    (
        "cascade_equivalent_stages.json",
        "via-exact",
        "tantivy",
        (raise_thread(RUNTIME), hang_thread(), truncated_custody()),
    ),
    # fallback: an error or a timeout moves on to the next stage.
    (
        "fallback_lexical.json",
        "primary",
        "tantivy",
        (
            raise_task(BAD_VALUE),
            raise_thread(OUTAGE),
            hang_async(),
            hang_thread(),
            delay(DELAY_S),
            late_answer(LATE_S),
            nan_score(),
        ),
    ),
    ("join_cites_superseded.json", "citing", "tantivy", (raise_task(ZERO), late_answer(LATE_S), negative_score())),
    ("join_cites_superseded.json", "superseded", "tantivy", (raise_thread(MISSING), hang_async(), out_of_filter())),
    ("corroborate_independent.json", "halcyon", "tantivy", (raise_task(OUTAGE), delay(DELAY_S), duplicate_hits())),
    # A score-sum union: the obligations' own reads (first call) ...
    ("early_stop_union.json", "heap-growth", "lancedb", (raise_task(RUNTIME), hang_thread(), nan_score())),
    ("early_stop_union.json", "buffer-leak", "lancedb", (nth_call(1, raise_task(ZERO)),)),
    # Remote legs over a live `race serve`: a fallback from remote to local, under a union.
    (
        "faults/remote_operators.json",
        "remote-stall",
        "remote",
        (*(raise_task(e) for e in EXCEPTIONS), raise_thread(RUNTIME), *EVERY_TIMING, *EVERY_MALFORMED),
    ),
    (
        "faults/remote_operators.json",
        "remote-advisory",
        "remote",
        (raise_thread(MISSING), hang_async(), duplicate_hits(), truncated_custody()),
    ),
    # The second corpus (tickets): filters on its own fields (an integer range, a keyword[]
    # value, a boolean) pushed into every backend, a date-role refine, a freshen, and origins
    # over its own lineage relation (``duplicates``) under a corroborate and a join.
    (
        "corpus2/tickets_operators.json",
        "lock-waits",
        "tantivy",
        (
            raise_task(MISSING),
            raise_thread(BAD_VALUE),
            hang_async(),
            late_answer(LATE_S),
            nan_score(),
            out_of_filter(),
            duplicate_hits(),
            truncated_custody(),
        ),
    ),
    (
        "corpus2/tickets_operators.json",
        "pool-exhaustion",
        "lancedb",
        (raise_task(OUTAGE), hang_thread(), negative_score(), inf_score(), out_of_filter()),
    ),
    (
        "corpus2/tickets_operators.json",
        "blockers",
        "graph",
        (raise_thread(ZERO), late_answer(LATE_S), duplicate_hits(), truncated_custody(), out_of_filter()),
    ),
    ("corpus2/tickets_operators.json", "sso-outage", "tantivy", (raise_task(RUNTIME), delay(DELAY_S), nan_score())),
    (
        "corpus2/tickets_corroborate.json",
        "latency-meaning",
        "lancedb",
        (raise_thread(MISSING), late_answer(LATE_S), duplicate_hits()),
    ),
    ("corpus2/tickets_corroborate.json", "latency-words", "tantivy", (raise_task(BAD_VALUE), hang_thread())),
)

# ... and the union's own deeper reads: call 2 is the first deeper sorted read of every
# input, call 3 its first random access. Their gaps belong to the union node.
_UNION_READS: tuple[tuple[str, Fault], ...] = (
    ("official-fix", nth_call(2, raise_task(MISSING))),
    ("official-fix", nth_call(2, raise_thread(BAD_VALUE))),
    ("official-fix", nth_call(2, hang_async())),
    ("official-fix", nth_call(2, negative_score())),
    ("official-fix", nth_call(2, out_of_filter())),
    ("heap-growth", nth_call(2, duplicate_hits())),
    ("heap-growth", nth_call(3, inf_score())),
)

# The plan deadline (500 ms) cuts these legs before their own deadline (2000 ms): `cancelled`.
_TIGHT: tuple[tuple[str, str, str, Fault], ...] = (
    ("showcase.json", "python-deps", "graph", hang_thread()),
    ("showcase.json", "memory-reports", "lancedb", hang_async()),
    ("fallback_lexical.json", "primary", "tantivy", hang_thread()),
    ("faults/remote_operators.json", "remote-stall", "remote", hang_async()),
)


# Adapters that do not cooperate with cancellation (a plain thread hop, a C call holding its
# thread, a client that swallows cancellation), on the first faulted leg of every plan above:
# the executor leaves the call behind at the leg deadline and drops its late answer.
_FIRST: dict[str, tuple[str, str, str]] = {}
for _plan, _ob, _backend, _ in _LEGS:
    _FIRST.setdefault(_plan, (_plan, _ob, _backend))
_FIRST_LEGS: tuple[tuple[str, str, str], ...] = tuple(_FIRST.values())
_TIGHT_UNCOOPERATIVE: tuple[tuple[str, str, str], ...] = (
    ("showcase.json", "python-deps", "graph"),
    ("faults/remote_operators.json", "remote-stall", "remote"),
)


def _budget(fault: Fault) -> Deadlines:
    return NORMAL if fault.category == "timing" else ROOMY


def build_matrix() -> tuple[Case, ...]:
    cases = [Case(plan, ob, backend, fault, _budget(fault)) for plan, ob, backend, faults in _LEGS for fault in faults]
    cases += [
        Case("early_stop_union.json", ob, "lancedb", fault, _budget(fault), target="answer")
        for ob, fault in _UNION_READS
    ]
    cases += [Case(plan, ob, backend, fault, deadlines=TIGHT) for plan, ob, backend, fault in _TIGHT]
    cases += [Case(plan, ob, backend, fault, NORMAL) for plan, ob, backend in _FIRST_LEGS for fault in UNCOOPERATIVE]
    cases += [
        Case(plan, ob, backend, fault, TIGHT) for plan, ob, backend in _TIGHT_UNCOOPERATIVE for fault in UNCOOPERATIVE
    ]
    ids = [c.id for c in cases]
    duplicated = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not duplicated, f"duplicate case ids: {duplicated}"
    return tuple(cases)


MATRIX = build_matrix()


# -- plans ----------------------------------------------------------------------------------


def fixture_plan(name: str, budget: Mapping[str, int]) -> dict[str, Any]:
    """A copy of a fixture plan with its deadlines replaced."""
    data = load_plan(name)
    data["budget"] = {**data.get("budget", {}), **budget}
    return data


def case_plan(case: Case) -> dict[str, Any]:
    return fixture_plan(
        case.plan, {"deadline_ms": case.deadlines.deadline_ms, "leg_timeout_ms": case.deadlines.leg_timeout_ms}
    )


def parents_of(plan: LogicalPlan) -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """Each node id -> (operator id, kind, inputs) of the operators that read it, in plan order."""
    parents: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for op in plan.operators:
        for child in op.inputs_of():
            parents.setdefault(child, []).append((op.id, op.op, op.inputs_of()))
    return parents


def physical_parents(explain: Explain) -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """``parents_of`` over the chosen physical tree, whose stages run in the order they are
    listed (a cascade's equivalent stages may be reordered by cost)."""
    parents: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for node in walk(explain.physical):
        if isinstance(node, OperatorNode):
            stages = tuple(child.node for child in node.children)
            for child in stages:
                entry = (node.node, node.op.value, stages)
                if entry not in parents.setdefault(child, []):
                    parents[child].append(entry)
    return parents


# -- outcomes -------------------------------------------------------------------------------


@dataclass
class Baseline:
    """The same plan run without faults (generous deadlines): what the faults take away."""

    receipt: Receipt


@dataclass
class CaseResult:
    case: Case
    receipt: Receipt | None = None
    escaped: str | None = None
    """``Type: message`` of an exception that escaped ``engine.run``."""
    hung: bool = False
    wall_ms: float = 0.0
    lag_ms: float = 0.0
    """The event loop's largest lag during the run (tests/loop_lag.py)."""
    injections: list[Injection] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)
    skipped: str | None = None
    violations: list[tuple[str, str]] = field(default_factory=list)
    """(tag, message) for every expectation the run broke; empty when it behaved."""

    @property
    def injected(self) -> bool:
        return bool(self.injections)

    @property
    def overrun(self) -> bool:
        return self.wall_ms > self.case.deadlines.deadline_ms + SLACK_MS + self.lag_ms

    @property
    def no_receipt(self) -> bool:
        return self.escaped is not None

    @property
    def named_gap(self) -> bool:
        return self.receipt is not None and bool(named_gaps(self.case, self.receipt))

    @property
    def silent_loss(self) -> bool:
        """The faulty node reads as satisfied, or no gap of the expected kind names it."""
        if self.receipt is None or not self.injected:
            return False
        status, _ = node_state(self.receipt, self.case.node)
        return status is ObligationStatus.SATISFIED or not self.named_gap

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.case.id,
            "plan": self.case.plan,
            "obligation": self.case.obligation,
            "backend": self.case.backend,
            "fault": self.case.fault.name,
            "category": self.case.fault.category,
            "deadline_ms": self.case.deadlines.deadline_ms,
            "leg_timeout_ms": self.case.deadlines.leg_timeout_ms,
            "skipped": self.skipped,
            "injected": len(self.injections),
            "receipt": self.receipt is not None,
            "escaped": self.escaped,
            "hung": self.hung,
            "wall_ms": round(self.wall_ms, 1),
            "lag_ms": round(self.lag_ms, 1),
            "named_gap": self.named_gap,
            "silent_loss": self.silent_loss,
            "overrun": self.overrun,
            "violations": [f"[{tag}] {text}" for tag, text in self.violations],
        }


class MatrixError(AssertionError):
    """A case that does not test what it says (its leg is not where it claims to be)."""


def expected_kinds(case: Case) -> frozenset[GapKind]:
    if case.fault.category == "timing":
        return frozenset({GapKind.CANCELLED if case.deadlines.plan_bound else GapKind.TIMEOUT})
    return frozenset({GapKind.BACKEND_ERROR})


def named_gaps(case: Case, receipt: Receipt) -> list[Any]:
    kinds = expected_kinds(case)
    return [g for g in receipt.gaps if g.kind in kinds and g.obligation == case.node]


def node_state(receipt: Receipt, node: str) -> tuple[ObligationStatus | None, SearchCoverage | None]:
    for ob in receipt.obligations:
        if ob.id == node:
            return ob.status, ob.search_coverage
    for op in receipt.operators:
        if op.id == node:
            return op.status, op.search_coverage
    return None, None


def evidence_hits(receipt: Receipt) -> list[Hit]:
    return [hit for item in receipt.evidence for hit in item.hits]


_ONE = re.compile(r"(?<![\w.])1(?![\w.])")


def _bad_hits(kind: str, injection: Injection, hits: Iterable[Hit]) -> list[Hit]:
    """The hits of ``hits`` that are the malformed one the injection made."""
    fp = injection.fingerprint
    mine = [h for h in hits if h.custody.request == fp and h.key == injection.key]
    if kind in ("nan_score", "inf_score"):
        return [h for h in mine if not math.isfinite(h.custody.score)]
    if kind == "negative_score":
        return [h for h in mine if h.custody.score < 0]
    if kind == "out_of_filter":
        return [
            h for h in mine if not all(f.matches(h.metadata) for f in injection.request.pushed if f.field in h.metadata)
        ]
    if kind == "duplicate_hits":
        return mine if len(mine) > 1 else []
    if kind == "truncated_custody":
        return [h for h in hits if h.custody.request == injection.bogus_request]
    raise AssertionError(kind)


def violations(
    case: Case, result: CaseResult, baseline: Baseline, plan: LogicalPlan, explain: Explain
) -> list[tuple[str, str]]:
    """Every expectation of the module docstring the run broke, as (tag, message)."""
    out: list[tuple[str, str]] = []
    deadline = case.deadlines.deadline_ms
    if result.hung:
        out.append(("hang", f"no receipt within {deadline} ms + {WATCHDOG_S:g} s; the suite cut the run"))
    if result.escaped is not None:
        out.append(("no-receipt", f"an exception escaped engine.run: {result.escaped}"))
    if result.overrun:
        out.append(
            (
                "deadline",
                f"run took {result.wall_ms:.0f} ms > plan deadline {deadline} ms + {SLACK_MS:g} ms"
                f" + the loop's lag {result.lag_ms:.0f} ms",
            )
        )
    if not result.injections:
        out.append(("matrix", f"the fault was never injected ({'; '.join(result.not_applied) or 'leg not called'})"))
    receipt = result.receipt
    if receipt is None or not result.injections:
        return out
    leaf = next(n for n in walk(explain.physical) if n.node == case.obligation and not isinstance(n, OperatorNode))

    category = case.fault.category
    kind = case.fault.base.kind
    kinds = sorted(k.value for k in expected_kinds(case))
    planned = sorted(o.id for o in plan.obligations)
    if sorted(o.id for o in receipt.obligations) != planned:
        out.append(("I3", f"receipt obligations {sorted(o.id for o in receipt.obligations)} != plan's {planned}"))

    # The gap that names the faulty node.
    named = named_gaps(case, receipt)
    status, coverage = node_state(receipt, case.node)
    if not named:
        seen = sorted({f"{g.kind.value}@{g.obligation}" for g in receipt.gaps})
        out.append(("gap", f"no {'/'.join(kinds)} gap names {case.node}; gaps: {seen}"))
    else:
        mine = [g for g in named if g.backend == case.backend]
        if not mine:
            out.append(("gap", f"the {'/'.join(kinds)} gap on {case.node} names backend {named[0].backend!r}"))
        if category == "error" and mine:
            exc = case.fault.base.exc
            assert exc is not None
            wanted = (type(exc).__name__, case.fault.message)
            if not any(all(w in g.detail for w in wanted) for g in mine):
                out.append(("detail", f"no gap detail carries {wanted[0]!r} and {wanted[1]!r}: {mine[0].detail!r}"))
        if category == "malformed" and mine:
            words = REASON_WORDS[kind]
            good = [g for g in mine if _ONE.search(g.detail) and any(w in g.detail.lower() for w in words)]
            if not good:
                details = [g.detail for g in mine]
                out.append(("detail", f"no gap detail counts 1 dropped hit and says {'/'.join(words)}: {details}"))

    # The faulty node's status.
    is_obligation = case.node == case.obligation
    if status is None:
        out.append(("I3", f"{case.node} is missing from the receipt"))
    elif category == "malformed":
        if status is not ObligationStatus.PARTIAL:
            out.append(("status", f"{case.node} is {status.value} after dropping malformed hits; expected partial"))
    elif is_obligation and isinstance(leaf, HybridNode):
        if status is not ObligationStatus.PARTIAL:
            out.append(("status", f"hybrid {case.node} is {status.value} with one leg lost; expected partial"))
    elif is_obligation:
        if status is not ObligationStatus.UNSATISFIED:
            out.append(("status", f"{case.node} is {status.value} with its only leg lost; expected unsatisfied"))
    elif status is ObligationStatus.SATISFIED:
        out.append(("status", f"{case.node} is satisfied over a failed read"))

    # Evidence: nothing from a failed or late leg; only the bad hits of a malformed answer.
    hits = evidence_hits(receipt)
    fps = {inj.fingerprint for inj in result.injections}
    if category in ("error", "timing"):
        leaked = sorted({h.key for h in hits if h.custody.request in fps})
        if leaked:
            out.append(("evidence", f"hits of the failed/late leg reached the evidence: {leaked[:5]}"))
    else:
        for inj in result.injections:
            bad = _bad_hits(kind, inj, hits)
            if bad:
                out.append(("evidence", f"the malformed hit {inj.key} ({kind}) reached the evidence"))
            if not is_obligation:
                continue  # a union's deeper read: which rows make its top k may rightly change
            kept = {(h.key, h.custody.request) for h in hits}
            before = {
                (h.key, h.custody.request)
                for h in evidence_hits(baseline.receipt)
                if h.custody.request == inj.fingerprint and (kind == "duplicate_hits" or h.key != inj.key)
            }
            lost = sorted(key for key, _ in before - kept)
            if lost:
                out.append(("evidence", f"good hits of the malformed answer were dropped too: {lost[:5]}"))
            if isinstance(leaf, ScanNode):
                was = next(o.evidence_count for o in baseline.receipt.obligations if o.id == case.obligation)
                now = next(o.evidence_count for o in receipt.obligations if o.id == case.obligation)
                expect = was if kind == "duplicate_hits" else was - 1
                if now != expect:
                    out.append(("evidence", f"{case.obligation} kept {now} items; expected {expect} (was {was})"))

    out += _operators(case, receipt, plan.root, physical_parents(explain), coverage)
    return out


def _operators(
    case: Case,
    receipt: Receipt,
    root: str,
    parents: Mapping[str, Sequence[tuple[str, str, tuple[str, ...]]]],
    coverage: SearchCoverage | None,
) -> list[tuple[str, str]]:
    """Every operator above the faulty node: never satisfied, never better covered, up to a
    cascade or fallback whose next stage took over (and which must have run it)."""
    out: list[tuple[str, str]] = []
    if coverage is None:
        return out
    operators = {op.id: op for op in receipt.operators}
    obligations = {ob.id: ob for ob in receipt.obligations}
    category = case.fault.category
    frontier, seen = [case.node], {case.node}
    while frontier:
        child = frontier.pop(0)
        above = parents.get(child, [])
        if not above and child == root and receipt.coverage.search_coverage.rank > coverage.rank:
            out.append(
                (
                    "coverage",
                    f"the root's coverage {receipt.coverage.search_coverage.value} is better than "
                    f"{case.node}'s {coverage.value}",
                )
            )
        for op_id, op_kind, inputs in above:
            if op_id in seen:
                continue
            seen.add(op_id)
            rec = operators.get(op_id)
            if rec is None:
                out.append(("I3", f"operator {op_id} is missing from the receipt"))
                continue
            stages = list(inputs)
            takes_over = op_kind == "cascade" or (op_kind == "fallback" and category in ("error", "timing"))
            if takes_over and stages.index(child) < len(stages) - 1:
                nxt = stages[stages.index(child) + 1]
                later = obligations.get(nxt)
                ran = later is not None and later.status is not ObligationStatus.NOT_ATTEMPTED
                limited = later is not None and any(g.kind is GapKind.RESOURCE_LIMITED for g in later.gaps)
                if not (ran or limited):
                    out.append(
                        (
                            "operator",
                            f"{op_kind} {op_id}: stage {child} fell short ({case.fault.name}) but the next "
                            f"stage {nxt} was not run",
                        )
                    )
                if op_kind == "fallback":
                    kinds = expected_kinds(case)
                    if not any(g.kind in kinds and (g.obligation == child or child in g.detail) for g in rec.gaps):
                        out.append(
                            (
                                "operator",
                                f"fallback {op_id} is {rec.status.value} but its own receipt's gaps do not show "
                                f"stage {child}'s {'/'.join(sorted(k.value for k in kinds))}",
                            )
                        )
                continue
            if rec.status is ObligationStatus.SATISFIED:
                out.append(("operator", f"{op_kind} {op_id} is satisfied over the faulty input {child}"))
            if rec.search_coverage.rank > coverage.rank:
                out.append(
                    (
                        "coverage",
                        f"{op_kind} {op_id} coverage {rec.search_coverage.value} is better than "
                        f"{case.node}'s {coverage.value}",
                    )
                )
            frontier.append(op_id)
    return out


# -- running --------------------------------------------------------------------------------


async def run_case(case: Case, adapters: Mapping[str, Adapter], baseline: Baseline) -> CaseResult:
    """Run one case on fresh engines over ``adapters`` (the real, opened ones) and classify it."""
    data = case_plan(case)
    plan = plan_from_dict(copy.deepcopy(data))
    wrapped = faulty_adapters(adapters, backend=case.backend, faults={case.obligation: case.fault})
    engine = Engine(wrapped)
    explain = await engine.plan(data)  # planning is not what is under test; its cache serves the run
    legs = [s for s in scans(explain.physical) if s.node == case.obligation]
    mine = [s for s in legs if s.request.backend == case.backend]
    if not mine:
        served = sorted(f"{s.rsc} on {s.request.backend}" for s in legs) or ["nothing"]
        raise MatrixError(f"{case.id}: the chosen plan serves {case.obligation} by {', '.join(served)}")
    result = CaseResult(case)
    if case.fault.base.kind == "out_of_filter" and not any(s.request.pushed for s in mine):
        result.skipped = f"{case.obligation}'s request on {case.backend} has no pushed filter to violate"
        return result
    await engine.warm(data)  # set-up (model loads, table opens) is not charged to the deadline
    started = time.monotonic()
    with anyio.move_on_after(case.deadlines.deadline_ms / 1000.0 + WATCHDOG_S) as watchdog:
        async with LoopLag() as lag:
            try:
                result.receipt = await engine.run(data)
            except Exception as exc:  # what escapes is exactly what the suite is looking for
                result.escaped = f"{type(exc).__name__}: {exc}"
    result.wall_ms = (time.monotonic() - started) * 1000.0
    result.lag_ms = lag.max_ms
    result.hung = watchdog.cancelled_caught
    faulty: FaultyAdapter = wrapped[case.backend]
    result.injections = list(faulty.injected)
    result.not_applied = list(faulty.not_applied)
    result.violations = violations(case, result, baseline, plan, explain)
    return result


async def run_baseline(plan_name: str, adapters: Mapping[str, Adapter]) -> Baseline:
    data = fixture_plan(plan_name, BASELINE_BUDGET)
    receipt = await Engine(faulty_adapters(adapters)).run(data)
    unhealthy = [
        f"{o.id}: {o.status.value}"
        for o in receipt.obligations
        if o.status not in (ObligationStatus.SATISFIED, ObligationStatus.NOT_ATTEMPTED)
    ]
    if unhealthy:
        raise MatrixError(f"{plan_name} is not healthy without faults: {unhealthy}")
    return Baseline(receipt)


class Runner:
    """Runs cases over one set of opened adapters; every case and baseline runs once.

    ``remote_url`` is a live ``race serve`` for the remote legs; it is connected to on the
    first case that needs it (set it before running one)."""

    def __init__(
        self,
        adapters: Mapping[str, Adapter],
        remote_url: str | None = None,
        corpora: Mapping[str, Mapping[str, Adapter]] | None = None,
    ) -> None:
        self.local = dict(adapters)
        self.corpora = {"bundled": self.local, **{k: dict(v) for k, v in (corpora or {}).items()}}
        """The opened adapters of each fixture corpus's index (``Case.corpus``)."""
        self.remote_url = remote_url
        self._remote: Adapter | None = None
        self.baselines: dict[tuple[str, bool], Baseline] = {}
        self.results: dict[str, CaseResult] = {}

    def adapters_for(self, case: Case) -> dict[str, Adapter]:
        if case.corpus not in self.corpora:
            raise MatrixError(f"{case.id} runs over the {case.corpus} index and none was given")
        if not case.needs_server:
            return dict(self.corpora[case.corpus])
        if self._remote is None:
            if self.remote_url is None:
                raise MatrixError(f"{case.id} needs a remote server and none was given")
            from backends.remote import RemoteAdapter

            self._remote = RemoteAdapter.connect(self.remote_url)
        return {**self.local, "remote": self._remote}

    async def baseline(self, case: Case) -> Baseline:
        key = (case.plan, case.needs_server)
        if key not in self.baselines:
            self.baselines[key] = await run_baseline(case.plan, self.adapters_for(case))
        return self.baselines[key]

    async def fresh(self, case: Case) -> CaseResult:
        """Run the case again, whatever ran before."""
        return await run_case(case, self.adapters_for(case), await self.baseline(case))

    async def run(self, case: Case) -> CaseResult:
        if case.id not in self.results:
            self.results[case.id] = await self.fresh(case)
        return self.results[case.id]

    def result(self, case: Case) -> CaseResult:
        if case.id not in self.results:
            anyio.run(self.run, case)
        return self.results[case.id]


def operators_above(case: Case) -> set[str]:
    """The operator kinds between the case's node and its plan's root."""
    plan = plan_from_dict(case_plan(case))
    parents = parents_of(plan)
    kinds: set[str] = set()
    frontier, seen = [case.node], set()
    while frontier:
        for op_id, op_kind, _ in parents.get(frontier.pop(), []):
            if op_id not in seen:
                seen.add(op_id)
                kinds.add(op_kind)
                frontier.append(op_id)
    if case.target is not None:
        kinds |= {op.op for op in plan.operators if op.id == case.target}
    return kinds


# -- counts ---------------------------------------------------------------------------------

COUNT_LABELS = {
    "cases": "cases",
    "skipped": "skipped (fault not applicable)",
    "faults_injected": "faults injected",
    "named_gaps": "named gaps (expected kind on the right node)",
    "silent_losses": "silent losses",
    "overruns": f"runs past deadline + {SLACK_MS:g} ms + the loop's lag",
    "hangs": f"hangs (cut {WATCHDOG_S:g} s after the deadline)",
    "no_receipt": "runs with no receipt (an exception escaped)",
    "as_expected": "cases with every expectation met",
}


def counts(results: Sequence[CaseResult]) -> dict[str, int]:
    ran = [r for r in results if r.skipped is None]
    return {
        "cases": len(results),
        "skipped": len(results) - len(ran),
        "faults_injected": sum(1 for r in ran if r.injected),
        "named_gaps": sum(1 for r in ran if r.named_gap),
        "silent_losses": sum(1 for r in ran if r.silent_loss),
        "overruns": sum(1 for r in ran if r.overrun),
        "hangs": sum(1 for r in ran if r.hung),
        "no_receipt": sum(1 for r in ran if r.no_receipt),
        "as_expected": sum(1 for r in ran if not r.violations),
    }


def markdown(results: Sequence[CaseResult]) -> str:
    table = counts(results)
    lines = ["| measure | count |", "|---|---:|"]
    lines += [f"| {COUNT_LABELS[k]} | {v} |" for k, v in table.items()]
    tags = Counter(tag for r in results for tag in {t for t, _ in r.violations})
    if tags:
        lines += ["", "| broken expectation | cases |", "|---|---:|"]
        lines += [f"| {tag} | {n} |" for tag, n in sorted(tags.items())]
    return "\n".join(lines) + "\n"


async def run_matrix(runner: Runner, cases: Sequence[Case], *, progress: bool = False) -> list[CaseResult]:
    out = []
    for i, case in enumerate(cases, start=1):
        result = await runner.run(case)
        out.append(result)
        if progress:
            mark = "skip" if result.skipped else ("ok" if not result.violations else "FAIL")
            print(f"[{i:3}/{len(cases)}] {mark:4} {case.id}", file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here and the markdown table beside it")
    parser.add_argument("--index", type=Path, help="an index of the bundled corpus (default: build one)")
    parser.add_argument("--corpus2-index", type=Path, help="an index of fixtures/corpus2 (default: build one)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-case progress")
    args = parser.parse_args(argv)

    from race.indexing.indexing import build_index
    from tests.remote.conftest import start_all, stop_all

    with tempfile.TemporaryDirectory(prefix="race-faults-") as tmp:
        index = args.index
        if index is None:
            index = Path(tmp) / "fixture-index"
            build_index(FIXTURES / "corpus", index)
        index2 = args.corpus2_index
        if index2 is None:
            index2 = Path(tmp) / "corpus2-index"
            build_index(FIXTURES / "corpus2", index2)
        (server,) = start_all(index, [()])
        try:
            corpora = {"corpus2": Engine.open(index2).adapters}
            runner = Runner(Engine.open(index).adapters, remote_url=server.url, corpora=corpora)
            started = time.monotonic()
            results = anyio.run(lambda: run_matrix(runner, MATRIX, progress=not args.quiet))
            elapsed = time.monotonic() - started
        finally:
            stop_all([server])
    table = markdown(results)
    print(table, end="")
    print(f"{len(results)} cases in {elapsed:.1f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "schema_version": "race.fault-matrix/1",
            "counts": counts(results),
            "cases": [r.summary() for r in results],
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")
        args.out.with_suffix(".md").write_text("# Fault matrix\n\n" + table)
    return 1 if any(r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
