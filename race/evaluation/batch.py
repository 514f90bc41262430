"""Batch plans: many logical plans over one engine, with bounded concurrency, one output line
per plan, resumable.

A plans file is JSONL: each non-blank line is a logical plan, or ``{"id": ..., "plan": {...}}``
to give the plan a caller's id. The output file is JSONL of records (``race.batch/1``), one
per plan line, each written with one ``write`` call so that a crash leaves at most a torn last
line::

    {"schema_version": "race.batch/1", "line": 3, "id": "claim-3", "source": "xxh3_128:…",
     "receipt": {…the receipt, exactly as `race run --json` gives it…}}
    {"schema_version": "race.batch/1", "line": 4, "source": "xxh3_128:…",
     "error": {"kind": "bad_input", "type": "PlanError", "message": "plans.jsonl:4: …"}}

``source`` is the fingerprint of the plan line's bytes. Resuming keeps every receipt whose line
and source still match the plans file and runs the rest again: plans without a record, plans
whose record is an error (the fault may have been transient), plans whose line changed, and a
torn last line. A plan's failure, of any kind, is its error record; it never stops the others.
Records are written in plans-file order within one invocation.

Local runs go through ``run_outcomes`` here; ``race.evaluation.batch_ray`` runs the same ``run_line`` on
Ray actors, so a record does not depend on where its plan ran. ``race.evaluation.batch_file`` keeps the
output file: appending, resuming, and the summary and exit status of ``race batch``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import anyio
import orjson

from planner import PlanInput
from race.receipt import Receipt
from rsc import InputError, RaceError, ReplayError, canonical_json, fingerprint_bytes, most_specific
from rsc.records import Record

BATCH_SCHEMA_VERSION = "race.batch/1"

_T = TypeVar("_T")
_MESSAGE_LIMIT = 2000


class PlanFailure(Record):
    """Why one plan of a batch has no receipt: ``bad_input`` (the plan or its reference is
    wrong; `race run` would exit 2), ``error`` (a RACE error, exit 1) or ``internal`` (anything
    else, including a worker that died)."""

    kind: Literal["bad_input", "error", "internal"]
    type: str
    message: str


Outcome = Receipt | PlanFailure


@dataclass(frozen=True)
class LineResult:
    """One plan line's output record and what it holds (``receipt`` or a failure's kind)."""

    line: int
    record: bytes
    kind: Literal["receipt", "bad_input", "error", "internal"]
    unmet: tuple[str, ...] = ()
    """The receipt's mandatory obligations left unsatisfied (``Receipt.unmet_mandatory``)."""


@dataclass(frozen=True)
class PlanLine:
    """One plan of a batch: its 1-based line, the caller's id if given, the plan's JSON text and
    the fingerprint of the line as read (what a resumed batch compares)."""

    line: int
    text: str
    source: str
    id: str | None = None


class Runner(Protocol):
    """What runs a batch's or an evaluation's plans: an engine (``race.engine.Engine``)."""

    def run(self, plan: PlanInput, *, where: str = "plan") -> Awaitable[Receipt]: ...

    def generations(self) -> dict[str, str]: ...

    async def aclose(self) -> None: ...


class EngineSource(Protocol):
    """How a batch opens the engine it runs on (``race.options.EngineOptions``); picklable, so
    a Ray actor opens its own."""

    @property
    def catalog(self) -> Path | None: ...

    def check(self) -> None: ...

    def open(self) -> Runner: ...


# -- reading ---------------------------------------------------------------------------------


def read_plan_lines(path: Path) -> list[PlanLine]:
    """The plans of a JSONL plans file. An unreadable file is bad input; a line that does not
    parse is still a plan line (its record will be its error)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    return plan_lines(data.split(b"\n"), where=str(path))


def plan_lines(lines: Iterable[bytes], *, where: str = "plans") -> list[PlanLine]:
    out: list[PlanLine] = []
    for number, raw in enumerate(lines, start=1):
        body = raw.strip()
        if not body:
            continue
        text = body.decode("utf-8", errors="replace")
        plan_id: str | None = None
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            value = None
        if isinstance(value, dict) and "plan" in value and set(value) <= {"id", "plan"}:
            plan_id = None if value.get("id") is None else str(value["id"])
            text = orjson.dumps(value["plan"]).decode()
        out.append(PlanLine(line=number, text=text, source=fingerprint_bytes(body), id=plan_id))
    return out


# -- one plan --------------------------------------------------------------------------------


def failure(exc: BaseException) -> PlanFailure:
    if isinstance(exc, BaseExceptionGroup):
        exc = most_specific(exc)
    kind: Literal["bad_input", "error", "internal"] = "internal"
    if isinstance(exc, InputError | ReplayError):
        kind = "bad_input"
    elif isinstance(exc, RaceError):
        kind = "error"
    # One line, and a bounded one: a worker's death can come with a whole traceback.
    message = " ".join(str(exc).split())[:_MESSAGE_LIMIT] or type(exc).__name__
    return PlanFailure(kind=kind, type=type(exc).__name__, message=message)


async def run_one(engine: Runner, plan: PlanInput, *, where: str) -> Outcome:
    """One plan's receipt, or its failure: nothing a plan does escapes as an exception."""
    try:
        return await engine.run(plan, where=where)
    except Exception as exc:
        return failure(exc)


def record_bytes(item: PlanLine, outcome: Outcome) -> bytes:
    """The output line (with its newline) of one plan."""
    head: dict[str, Any] = {"schema_version": BATCH_SCHEMA_VERSION, "line": item.line, "source": item.source}
    if item.id is not None:
        head["id"] = item.id
    if isinstance(outcome, Receipt):
        head["receipt"] = orjson.Fragment(canonical_json(outcome))
    else:
        head["error"] = outcome.model_dump(mode="json")
    return orjson.dumps(head, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def line_result(item: PlanLine, outcome: Outcome) -> LineResult:
    if isinstance(outcome, Receipt):
        return LineResult(item.line, record_bytes(item, outcome), "receipt", outcome.unmet_mandatory())
    return LineResult(line=item.line, record=record_bytes(item, outcome), kind=outcome.kind)


async def run_line(engine: Runner, item: PlanLine, *, plans: str) -> LineResult:
    """One plan line's record; ``plans`` names the plans file in error messages."""
    return line_result(item, await run_one(engine, item.text.encode(), where=f"{plans}:{item.line}"))


def receipt_of(record: bytes | dict[str, Any]) -> Receipt | None:
    """The receipt a record holds, or None for an error record."""
    data = orjson.loads(record) if isinstance(record, bytes) else record
    body = data.get("receipt")
    return None if body is None else Receipt.model_validate(body)


# -- many plans ------------------------------------------------------------------------------


async def run_outcomes(
    run: Callable[[int], Awaitable[_T]],
    count: int,
    *,
    concurrency: int,
    emit: Callable[[int, _T], None],
) -> None:
    """Run ``run(0) … run(count - 1)``, at most ``concurrency`` at once, and ``emit`` each
    outcome in index order as soon as every earlier one is emitted. At most a window of
    ``4 * concurrency`` outcomes waits for a slow predecessor; plan deadlines bound that wait."""
    if concurrency < 1:
        raise InputError(f"concurrency must be at least 1, not {concurrency}", where="concurrency")
    limiter = anyio.CapacityLimiter(concurrency)
    window = anyio.Semaphore(max(4 * concurrency, 16))
    waiting: dict[int, _T] = {}
    next_out = 0

    async def one(index: int) -> None:
        nonlocal next_out
        async with limiter:
            waiting[index] = await run(index)
        while next_out in waiting:
            emit(next_out, waiting.pop(next_out))
            next_out += 1
            window.release()

    async with anyio.create_task_group() as group:
        for index in range(count):
            await window.acquire()
            group.start_soon(one, index)


async def run_many(
    engine: Runner, plans: Sequence[PlanInput], *, concurrency: int = 4, where: str = "plan"
) -> list[Outcome]:
    """Every plan's receipt or failure, in the order given (``Engine.run_many``)."""
    out: list[Outcome | None] = [None] * len(plans)

    async def run(index: int) -> Outcome:
        return await run_one(engine, plans[index], where=f"{where}[{index}]")

    def emit(index: int, outcome: Outcome) -> None:
        out[index] = outcome

    await run_outcomes(run, len(plans), concurrency=concurrency, emit=emit)
    return [o for o in out if o is not None]
