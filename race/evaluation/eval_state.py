"""The files of a streaming evaluation: the TREC run files of ``--export-runs``, and the state
file (``race eval --state FILE``), one JSONL record per query
(``QueryRecord``) appended with one ``write`` and an ``fsync`` as the
query finishes, so that an interrupted evaluation resumes where it stopped.

Resuming keeps every record whose query is still in the set and whose source (the query, its
judgments and the settings) is unchanged; every other line — a changed query, a torn last line,
a duplicate, a record this version cannot read — is dropped by rewriting the file atomically,
and its query runs again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson
from pydantic import Field, ValidationError

from race.evaluation.batch_file import RecordWriter
from race.evaluation.stats import WorkOrder
from rsc import InputError, Record, canonical_json

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Run(Record):
    """One strategy's reduced answer to one query: its documents and what the report needs."""

    docs: tuple[str, ...]
    not_scored: str | None = None
    chunks: int = 0
    """Chunks the strategy read to rank these documents (0 for a labelled plan, run as written)."""


class QueryRecord(Record):
    """Everything an evaluation keeps of one query (one line of a state file)."""

    schema_version: str = "race.eval-query/1"
    query: str
    source: str
    """Fingerprint of the query, its judgments and the settings: a resumed evaluation keeps a
    record only if it is unchanged."""
    runs: dict[str, Run]
    orders: tuple[WorkOrder, ...] = ()
    legs: dict[str, int] = Field(default_factory=dict)
    """Leg -> chunks read for the work orders (empty when the query needed none)."""


class StateFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer: RecordWriter | None = None

    def resume(self, sources: Mapping[str, str]) -> dict[str, QueryRecord]:
        """The records of ``path`` still valid for ``sources`` (query id -> source)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", where=str(self.path)) from exc
        kept: dict[str, QueryRecord] = {}
        lines: list[bytes] = []
        for raw in data.split(b"\n")[:-1]:  # the text after the last newline is torn (or nothing)
            try:
                record = QueryRecord.model_validate(orjson.loads(raw))
            except (orjson.JSONDecodeError, ValidationError):
                continue
            if record.query in kept or sources.get(record.query) != record.source:
                continue
            kept[record.query] = record
            lines.append(raw + b"\n")
        if b"".join(lines) != data:
            temporary = self.path.with_name(f".{self.path.name}.resume")
            temporary.unlink(missing_ok=True)  # left by a resume that crashed
            with RecordWriter(temporary) as writer:
                writer.write(b"".join(lines))
            os.replace(temporary, self.path)
        self._writer = RecordWriter(self.path)
        return kept

    def append(self, record: QueryRecord) -> None:
        if self._writer is None:
            self._writer = RecordWriter(self.path)
        self._writer.write(canonical_json(record) + b"\n")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def write_trec_runs(records: Sequence[QueryRecord], names: Sequence[str], directory: Path) -> list[Path]:
    """One TREC run file per strategy, ``DIR/STRATEGY.run`` (``query Q0 doc rank score tag``, the
    score ``len(run) - rank + 1`` so that every reader ranks as the report did), in query-set
    order; each written whole to a temporary file, then renamed."""
    out = []
    for name in names:
        lines = [
            f"{r.query} Q0 {doc} {rank} {len(r.runs[name].docs) - rank + 1} race-{name}\n"
            for r in records
            for rank, doc in enumerate(r.runs[name].docs, start=1)
        ]
        path = directory / f"{name}.run"
        temporary = directory / f".{name}.run.tmp"
        temporary.write_text("".join(lines), encoding="utf-8")
        os.replace(temporary, path)
        out.append(path)
    return out


def check_run_names(names: Sequence[str], directory: Path) -> None:
    """Bad input before anything runs: a strategy name that is no file name, a folder not writable."""
    for name in names:
        if not _NAME.fullmatch(name):
            raise InputError(
                f"strategy {name!r} is not a run file name (letters, digits, . _ -)", where="--export-runs"
            )
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create: {exc.strerror}", where=str(directory)) from exc
    if not os.access(directory, os.W_OK):
        raise InputError("not writable", where=str(directory))
