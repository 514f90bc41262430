"""Checking an answer's citations against the context packet it was written from.

A context packet (``race.evidence.packet``) numbers its passages 1 to n: request-local
handles, valid for that packet only. An answer cites them as ``[3]``, ``[3, 5]`` or
``[3][5]``; ``cite_answer`` reads every handle the answer uses, resolves each through the
packet's handle table (never through an id: a handle is only a passage's place in the
packet), and reads the cited lines again through custody, as ``race verify`` does
(``race.evidence.verify.SourceFile``). Each handle is judged:

- ``valid``: the cited lines of the file still hold the text the packet quoted (the file's
  hash may differ because another part of it changed: ``source_hash: differs``);
- ``changed``: the file is there but those lines no longer hold it (where the same lines
  are elsewhere in the file, the detail says where);
- ``missing``: the file is gone, unreadable, or its path leaves the corpus root;
- ``unknown_handle``: the packet never gave that number.

The answer's sentences that cite nothing are listed too. ``race cite`` exits with status 3
when any handle is not ``valid``. A packet is checked as it is: one whose recorded fingerprint
does not match its content, or differs from the fingerprint the caller says it used, is
refused as bad input.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from race.evidence.packet_text import PACKET_SCHEMA_VERSION, Handle, Packet, Passage, packet_fingerprint
from race.evidence.verify import SourceFile
from rsc import InputError, Record, first_validation_error
from rsc.canonical import read_json

CITE_SCHEMA_VERSION = "race.cite/1"

HandleStatus = Literal["valid", "changed", "missing", "unknown_handle"]

_GROUP = r"\[\s*\d+(?:\s*,\s*\d+)*\s*\]"
# A citation: a bracketed list of integers not glued to a word (``a[0]`` is code, not a citation).
_CITATION = re.compile(rf"(?<!\w){_GROUP}")
# A sentence ends at . ! or ?, closing quotes or brackets, and the citations that follow it.
_END = re.compile(rf"[.!?]+[\"')\]’”]*(?:[ \t]*{_GROUP})*")
_OPENS = "\"'(“‘"


class HandleCheck(Record):
    """One handle an answer cites, resolved through the packet and read again."""

    handle: int
    """The number the answer cited."""
    status: HandleStatus
    """``valid``, ``changed``, ``missing`` or ``unknown_handle`` (a number the packet never gave)."""
    evidence: str | None = None
    """The evidence item the handle resolves to (none for an unknown handle)."""
    source_path: str | None = None
    """The cited file, relative to the corpus root."""
    line_start: int | None = None
    """The first cited line, from 1."""
    line_end: int | None = None
    """The last cited line (inclusive)."""
    source_hash: Literal["same", "differs", "missing"] | None = None
    """Whether the whole file is byte-identical to the one indexed (none for an unknown handle)."""
    sentences: tuple[int, ...]
    """The answer's sentences (numbered from 1) that cite this handle."""
    detail: str = ""
    """Why the citation does not hold, or which handles the packet gave."""


class Sentence(Record):
    """One sentence of the answer."""

    number: int
    """The sentence's place in the answer, from 1."""
    line: int
    """The answer's line (from 1) the sentence starts on."""
    text: str
    """The sentence as written, its citations included."""
    handles: tuple[int, ...]
    """The handles it cites, in the order it cites them."""


class CiteReport(Record):
    """An answer's citations checked against its packet (``race.cite/1``): what ``race cite --json`` prints."""

    schema_version: str = CITE_SCHEMA_VERSION
    """``race.cite/1``."""
    packet: str
    """The fingerprint of the packet the handles were resolved through."""
    counts: dict[str, int]
    """How many distinct handles the answer cited, by status."""
    handles: tuple[HandleCheck, ...]
    """Each handle the answer cited, once, in increasing order."""
    sentences: int
    """How many sentences the answer has."""
    uncited: tuple[Sentence, ...]
    """The sentences that cite no handle."""

    @property
    def holds(self) -> bool:
        return all(h.status == "valid" for h in self.handles)


def cited_handles(text: str) -> list[int]:
    """Every handle ``text`` cites, in order, repeats kept: ``[3]``, ``[3, 5]``, ``[3][5]``."""
    return [int(n) for group in _CITATION.findall(text) for n in re.findall(r"\d+", group)]


def sentences(answer: str) -> list[Sentence]:
    """The answer's sentences: each non-blank line is split where a sentence ends (``.``, ``!``
    or ``?`` and the citations right after it) before a word that starts with a capital, a digit
    or a quote; citations standing at the start of a line belong to the sentence before."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(answer.splitlines(), start=1):
        start = 0
        for end in _END.finditer(line):
            after = line[end.end() :]
            rest = after.lstrip()
            if after[:1] in (" ", "\t") and rest and (rest[0].isupper() or rest[0].isdigit() or rest[0] in _OPENS):
                found.append((number, line[start : end.end()]))
                start = end.end()
        found.append((number, line[start:]))
    merged: list[tuple[int, str]] = []
    for number, piece in ((n, p.strip()) for n, p in found):
        if not piece:
            continue
        if merged and not _CITATION.sub("", piece).strip(" \t.,;:"):
            merged[-1] = (merged[-1][0], f"{merged[-1][1]} {piece}")
        else:
            merged.append((number, piece))
    return [
        Sentence(number=i, line=line, text=text, handles=tuple(cited_handles(text)))
        for i, (line, text) in enumerate(merged, start=1)
    ]


def _check(handle: Handle, source: SourceFile) -> tuple[HandleStatus, Literal["same", "differs", "missing"], str]:
    if source.data is None:
        return "missing", "missing", source.error
    hashed: Literal["same", "differs"] = "same" if source.digest == handle.source_hash else "differs"
    span = handle.line_end - handle.line_start + 1
    lines = source.shown or source.lines  # an HTML passage quotes the lines as a reader sees them

    def digest(first: int) -> str:
        text = "".join(lines[first - 1 : first - 1 + span])
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    if handle.line_end <= len(lines) and digest(handle.line_start) == handle.quoted_sha256:
        return "valid", hashed, ""
    where = f"lines {handle.line_start}-{handle.line_end} no longer hold the quoted text"
    for first in range(1, len(lines) - span + 2):
        if digest(first) == handle.quoted_sha256:
            return "changed", hashed, f"{where}; it is now at lines {first}-{first + span - 1}"
    return "changed", hashed, f"{where}, and it is nowhere else in the file"


def load_packet(path: Path) -> Packet:
    """A packet written by ``race context --json``; anything else is one ``InputError``."""
    try:
        data = read_json(path.read_bytes(), where=str(path), error=InputError)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    if not isinstance(data, dict) or data.get("schema_version") != PACKET_SCHEMA_VERSION:
        raise InputError(f"not a context packet ({PACKET_SCHEMA_VERSION}, `race context --json`)", where=str(path))
    try:
        return Packet.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"not a context packet: {first_validation_error(exc)}", where=str(path)) from exc


def load_answer(path: Path) -> str:
    """The answer's text (UTF-8)."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: byte at offset {exc.start}", where=str(path)) from exc


def check_packet(packet: Packet, *, where: str = "packet", fingerprint: str | None = None) -> None:
    """Refuse a packet whose handle table or fingerprint does not match its passages, or whose
    fingerprint is not the one the caller used (``fingerprint``)."""

    def resolves(p: Passage, h: Handle) -> bool:
        c = p.citation
        return (p.handle, p.id, p.evidence, c.source_path, c.line_start, c.line_end, c.source_hash, c.chunk_id) == (
            h.handle,
            h.passage,
            h.evidence,
            h.source_path,
            h.line_start,
            h.line_end,
            h.source_hash,
            h.chunk_id,
        )

    numbers = [h.handle for h in packet.handles]
    if numbers != list(range(1, len(packet.passages) + 1)) or not all(
        resolves(p, h) for p, h in zip(packet.passages, packet.handles, strict=True)
    ):
        raise InputError("the packet's handles are not its passages numbered 1 to n", where=f"{where}: handles")
    if packet_fingerprint(packet) != packet.fingerprint:
        raise InputError("the packet's content does not match its fingerprint", where=f"{where}: fingerprint")
    if fingerprint is not None and fingerprint != packet.fingerprint:
        raise InputError(
            f"the packet's fingerprint is {packet.fingerprint}, not {fingerprint}: the answer was written "
            "from another packet, whose handles this one cannot resolve",
            where="--packet-fingerprint",
        )


def cite_answer(
    packet: Packet, answer: str, corpus: Path, *, packet_fingerprint: str | None = None, where: str = "packet"
) -> CiteReport:
    """Check every handle ``answer`` cites against ``packet`` and the files under ``corpus``."""
    check_packet(packet, where=where, fingerprint=packet_fingerprint)
    root = corpus if corpus.is_dir() else corpus.parent  # a JSONL corpus names its file
    table = {h.handle: h for h in packet.handles}
    parts = sentences(answer)
    citing: dict[int, list[int]] = {}
    for s in parts:
        for n in s.handles:
            if s.number not in citing.setdefault(n, []):
                citing[n].append(s.number)
    sources: dict[str, SourceFile] = {}
    checks: list[HandleCheck] = []
    for n, cited_by in sorted(citing.items()):
        handle = table.get(n)
        if handle is None:
            given = f"1-{len(table)}" if table else "none"
            detail = f"the packet gave handles {given}"
            checks.append(HandleCheck(handle=n, status="unknown_handle", sentences=tuple(cited_by), detail=detail))
            continue
        if handle.source_path not in sources:
            sources[handle.source_path] = SourceFile(root, handle.source_path)
        status, hashed, detail = _check(handle, sources[handle.source_path])
        checks.append(
            HandleCheck(
                handle=n,
                status=status,
                evidence=handle.evidence,
                source_path=handle.source_path,
                line_start=handle.line_start,
                line_end=handle.line_end,
                source_hash=hashed,
                sentences=tuple(cited_by),
                detail=detail,
            )
        )
    counts = Counter(c.status for c in checks)
    return CiteReport(
        packet=packet.fingerprint,
        counts={s: counts.get(s, 0) for s in ("valid", "changed", "missing", "unknown_handle")},
        handles=tuple(checks),
        sentences=len(parts),
        uncited=tuple(s for s in parts if not s.handles),
    )


def cite_text(report: CiteReport) -> str:
    """One line per cited handle, one per sentence that cites nothing, then the counts."""
    out = []
    for c in report.handles:
        where = f" {c.source_path} lines {c.line_start}-{c.line_end}" if c.source_path else ""
        hashed = " (file hash differs; the cited lines are intact)" if c.source_hash == "differs" else ""
        detail = f": {c.detail}" if c.detail and c.status != "valid" else hashed
        cited = ", ".join(map(str, c.sentences))
        out.append(f"[{c.handle}] {c.status:<14}{where} (sentence {cited}){detail}")
    for s in report.uncited:
        out.append(f"uncited  line {s.line}, sentence {s.number}: {s.text}")
    counts = ", ".join(f"{n} {s}" for s, n in report.counts.items())
    out.append(
        f"{len(report.handles)} handles cited: {counts}; {len(report.uncited)} of {report.sentences} "
        f"sentences cite nothing (packet {report.packet})"
    )
    return "\n".join(out) + "\n"
