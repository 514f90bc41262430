"""The output file of ``race batch`` (``race.evaluation.batch``): records appended one ``write`` each,
resuming from what a file already holds, and the batch's summary and exit status.

Resuming keeps every receipt whose line and source still match the plans file and runs the
rest again, appending their records, then puts the file back in plans-file order; the receipts
it keeps count toward the exit status as the new ones do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import orjson
from pydantic import ValidationError

from race.evaluation.batch import (
    BATCH_SCHEMA_VERSION,
    EngineSource,
    LineResult,
    PlanLine,
    read_plan_lines,
    run_line,
    run_outcomes,
)
from race.receipt import Receipt
from rsc import InputError

_RECEIPT_SCHEMA = Receipt.model_fields["schema_version"].default

# -- the output file -------------------------------------------------------------------------


class RecordWriter:
    """Appends records to the output file, each with one ``write`` and an ``fsync``: a record is
    either on disk whole or, after a crash, a torn last line that resuming detects."""

    def __init__(self, path: Path, *, sync: bool = True) -> None:
        self.path = path
        self.sync = sync
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror}", where=str(path)) from exc

    def write(self, record: bytes) -> None:
        view = memoryview(record)
        while view:
            view = view[os.write(self._fd, view) :]
        if self.sync:
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def resume(out: Path, plans: Sequence[PlanLine]) -> dict[int, tuple[str, ...]]:
    """The plan lines whose receipt ``out`` already holds, each with its mandatory obligations
    left unsatisfied (``Receipt.unmet_mandatory``). Every other record — an error, a
    receipt of a line that changed or no longer exists, a duplicate, a torn or unreadable
    line — is dropped by rewriting the file atomically (a temporary file, then a rename)."""
    try:
        data = out.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(out)) from exc
    sources = {p.line: p.source for p in plans}
    kept: list[bytes] = []
    done: dict[int, tuple[str, ...]] = {}
    lines = data.split(b"\n")
    # The text after the last newline is a torn record (or nothing).
    for raw in lines[:-1]:
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(record, dict) or record.get("schema_version") != BATCH_SCHEMA_VERSION:
            continue
        line = record.get("line")
        receipt = record.get("receipt")
        if not isinstance(line, int) or line in done or sources.get(line) != record.get("source"):
            continue
        if isinstance(receipt, dict) and receipt.get("schema_version") == _RECEIPT_SCHEMA:
            try:
                unmet = Receipt.model_validate(receipt).unmet_mandatory()
            except ValidationError:
                continue  # not a receipt this version can read: the plan runs again
            done[line] = unmet
            kept.append(raw + b"\n")
    if b"".join(kept) != data:
        temporary = out.with_name(f".{out.name}.resume")
        temporary.unlink(missing_ok=True)  # left by a resume that crashed
        with RecordWriter(temporary) as writer:
            writer.write(b"".join(kept))
        os.replace(temporary, out)
    return done


def put_in_order(out: Path) -> bool:
    """Rewrite ``out`` with its records in plans-file order when a resumed batch appended the
    plans it ran again after later lines it kept; atomically (a temporary file, then a rename),
    so a crash leaves either order, never a part. Whether the file was rewritten."""
    records = out.read_bytes().split(b"\n")
    keyed = [(int(orjson.loads(raw)["line"]), raw + b"\n") for raw in records[:-1]]
    ordered = sorted(keyed, key=lambda pair: pair[0])
    if ordered == keyed:
        return False
    temporary = out.with_name(f".{out.name}.resume")
    temporary.unlink(missing_ok=True)
    with RecordWriter(temporary) as writer:
        writer.write(b"".join(raw for _, raw in ordered))
    os.replace(temporary, out)
    return True


@dataclass
class BatchSummary:
    plans: int = 0
    already: int = 0
    receipts: int = 0
    errors: int = 0
    internal: int = 0
    unmet: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Per plan line (written now or before), the mandatory obligations its receipt left unsatisfied."""

    def describe(self, out: Path) -> str:
        unmet = f", {len(self.unmet)} with mandatory obligations not satisfied" if self.unmet else ""
        return (
            f"race batch: {self.plans} plans: {self.receipts} receipts written, {self.already} already in {out}, "
            f"{self.errors} error records{unmet}"
        )

    def add(self, result: LineResult) -> None:
        if result.kind == "receipt":
            self.receipts += 1
            if result.unmet:
                self.unmet[result.line] = result.unmet
        else:
            self.errors += 1
            self.internal += result.kind != "bad_input"

    @property
    def exit_status(self) -> int:
        """0: every plan has a receipt whose mandatory obligations are satisfied; 3: every plan has
        a receipt, and some leave a mandatory obligation unsatisfied (as ``race run``); 2: some
        plans are bad input; 1: some failed otherwise."""
        if self.errors:
            return 1 if self.internal else 2
        return 3 if self.unmet else 0


def run_batch_file(
    plans: Path,
    out: Path,
    options: EngineSource,
    *,
    concurrency: int = 4,
    ray: str | None = None,
    progress: Callable[[int], Callable[[LineResult], None]] | None = None,
) -> BatchSummary:
    """``race batch``: every plan line of ``plans`` not yet answered in ``out``, run on one local
    engine (``concurrency`` plans at once) or on Ray actors (``ray``: ``local`` or an address;
    ``concurrency`` actors), each record appended in plans-file order. ``progress(total)``
    gives the callback told of every record. Bad input of the batch itself (no plans file, no
    index, a concurrency below 1) raises before anything is written."""
    if concurrency < 1:
        raise InputError(f"must be at least 1, not {concurrency}", where="--concurrency")
    items = read_plan_lines(plans)
    options.check()
    engine = None if ray else options.open()
    if ray and options.catalog is not None:
        # Each actor opens the catalog itself: an instance that cannot be opened is bad input
        # here, before Ray starts or any record is written.
        anyio.run(options.open().aclose)
    joined = False
    if ray:
        from race.evaluation.batch_ray import run_batch_on_ray
        from race.indexing.distributed import connect, shutdown

        joined = connect(ray)
    try:
        done = resume(out, items)
        todo = [item for item in items if item.line not in done]
        summary = BatchSummary(
            plans=len(items), already=len(items) - len(todo), unmet={n: u for n, u in done.items() if u}
        )
        told = progress(len(todo)) if progress is not None else None
        with RecordWriter(out) as writer:

            def emit(result: LineResult) -> None:
                writer.write(result.record)
                summary.add(result)
                if told is not None:
                    told(result)

            if ray:
                run_batch_on_ray(todo, options, plans=str(plans), actors=concurrency, emit=emit)
            else:

                async def run(index: int) -> LineResult:
                    assert engine is not None
                    return await run_line(engine, todo[index], plans=str(plans))

                anyio.run(lambda: run_outcomes(run, len(todo), concurrency=concurrency, emit=lambda _, r: emit(r)))
        # Plans run again (errors, changed or torn lines) were appended after the receipts kept.
        if done and todo and todo[0].line < max(done):
            put_in_order(out)
    finally:
        if joined:
            shutdown()
    return summary
