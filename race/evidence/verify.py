"""Citation validity: does each hit of a receipt still point at the text it quotes?

Every hit's custody names a source file (relative to the corpus root), a 1-based inclusive
line span, character offsets where known, and the sha256 of the whole file when it was
indexed. ``verify_receipt`` re-reads each cited file and judges each hit:

- ``valid``: the cited lines still hold the hit's text. The file's hash may differ —
  another passage of the same file was edited — which the check reports as
  ``source_hash: differs`` without failing the citation; when an earlier line changed length,
  the character offsets shift while the lines hold, and the detail gives the new offsets.
- ``moved``: the text is still in the file, but at other lines or offsets (the new span is
  given).
- ``changed``: the file is there but the text is not.
- ``missing``: the file is gone, unreadable, or its path leaves the corpus root.

An HTML file is read as the index read it (``backends.ingest.formats``): its text view, markup
blanked out, on the file's own lines and character offsets; its hash is that of its bytes.

In a JSONL corpus a hit cites ``docs.jsonl#ID``: the document's own text, whose lines and
hash the loader recorded, is read from the record with that id (under the corpus schema's
id and text fields).

A hit whose custody carries no text can only be checked by hash: ``valid`` if the file is
byte-identical, otherwise ``changed``. ``race verify`` exits with status 3 when any citation
is not ``valid``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Literal

from backends.ingest.formats import document_kind, html_shown, html_text
from race.receipt import Receipt
from rsc import Hit, Record

VERIFY_SCHEMA_VERSION = "race.verify/1"
EXIT_CITATION_BROKEN = 3

CitationStatus = Literal["valid", "moved", "changed", "missing"]


class CitationCheck(Record):
    evidence: str
    """The evidence item's key."""
    hit: int
    """0-based position of the hit in the evidence item's ``hits``."""
    rsc: str
    chunk_id: str
    source_path: str | None
    line_start: int | None
    line_end: int | None
    status: CitationStatus
    source_hash: Literal["same", "differs", "missing"]
    found_line_start: int | None = None
    found_line_end: int | None = None
    detail: str = ""


class VerifyReport(Record):
    schema_version: str = VERIFY_SCHEMA_VERSION
    corpus: str
    counts: dict[str, int]
    citations: tuple[CitationCheck, ...]

    @property
    def holds(self) -> bool:
        return all(c.status == "valid" for c in self.citations)

    def broken(self) -> tuple[CitationCheck, ...]:
        return tuple(c for c in self.citations if c.status != "valid")


def _jsonl_document(path: Path, content: str, doc_id: str) -> str:
    """The text of one document of a JSONL corpus (``docs.jsonl#ID``): its hashes and line
    spans are the document's own text, as the loader chunked it."""
    from backends.ingest.schema import load_schema

    schema = load_schema(path)
    for line in content.splitlines():
        if line.strip():
            record = json.loads(line)
            if isinstance(record, dict) and record.get(schema.id_field) == doc_id:
                text = record.get(schema.text_field)
                if not isinstance(text, str):
                    raise LookupError(f"document {doc_id!r} has no text field {schema.text_field!r}")
                return text
    raise LookupError(f"document {doc_id!r} not found in {path.name}")


class SourceFile:
    """One cited file as it is now, read once however many hits cite it."""

    def __init__(self, root: Path, relative: str) -> None:
        self.error = ""
        self.data: bytes | None = None
        self.text = ""
        self.lines: list[str] = []
        self.offsets: list[int] = [0]
        self._html: str | None = None  # an HTML file's own text, for ``shown``
        root = root.resolve()
        relative, _, document = relative.partition("#")
        path = (root / relative).resolve()
        if not path.is_relative_to(root):
            self.error = "path leaves the corpus root"
            return
        try:
            self.data = path.read_bytes()
            self.text = self.data.decode("utf-8")
            if document and path.suffix == ".jsonl":
                self.text = _jsonl_document(path, self.text, document)
                self.data = self.text.encode("utf-8")
            elif document_kind(path.name) == "html":
                # The text view the index read: markup blanked, lines and offsets the file's own.
                self._html, self.text = self.text, html_text(self.text)[0]
        except FileNotFoundError:
            self.error = "file not found"
            self.data = None
            return
        except LookupError as exc:
            self.error = str(exc)
            self.data = None
            return
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.error = f"unreadable: {exc}"
            self.data = None
            return
        self.lines = self.text.splitlines(keepends=True)
        for line in self.lines:
            self.offsets.append(self.offsets[-1] + len(line))

    @cached_property
    def shown(self) -> list[str]:
        """An HTML file's lines as a reader sees them (``html_shown``), read only by the packets
        that quote them; empty for any other file."""
        return html_shown(self._html) if self._html is not None and self.data is not None else []

    @property
    def digest(self) -> str:
        assert self.data is not None
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def span(self, first: int, last: int) -> str | None:
        """The text of lines ``first``..``last`` (1-based, inclusive) as the chunker joins them."""
        if first < 1 or last < first or last > len(self.lines):
            return None
        return "".join(self.lines[first - 1 : last]).rstrip("\n")

    def find(self, text: str) -> tuple[int, int, int] | None:
        """The first place the text starts a line: (line_start, line_end, char_start)."""
        at = self.text.find(text)
        while at != -1:
            if at == 0 or self.text[at - 1] == "\n":
                first = self.text.count("\n", 0, at) + 1
                return first, first + text.count("\n"), at
            at = self.text.find(text, at + 1)
        return None


def check_hit(hit: Hit, source: SourceFile, *, evidence: str, position: int) -> CitationCheck:
    c = hit.custody
    base = dict(
        evidence=evidence,
        hit=position,
        rsc=c.rsc,
        chunk_id=c.chunk_id,
        source_path=c.source_path,
        line_start=c.line_start,
        line_end=c.line_end,
    )
    if c.line_start is None or c.line_end is None or c.source_hash is None:
        # A source without a path, line span or hash (an attached table) cannot be checked.
        detail = "; ".join(f"{k}: {why}" for k, why in sorted(c.absent.items()))
        return CitationCheck(**base, status="missing", source_hash="missing", detail=detail)
    if source.data is None:
        return CitationCheck(**base, status="missing", source_hash="missing", detail=source.error)
    same_hash = source.digest == c.source_hash
    hash_state: Literal["same", "differs"] = "same" if same_hash else "differs"
    if not hit.text:
        status: CitationStatus = "valid" if same_hash else "changed"
        detail = "no quoted text in the receipt: checked by the file's hash only"
        return CitationCheck(**base, status=status, source_hash=hash_state, detail=detail)
    # A citation names lines: while its lines hold the text it is valid, even if an edit of an
    # earlier line shifted its character offsets (the detail says so). Offsets decide only
    # where a custody records no lines.
    if source.span(c.line_start, c.line_end) == hit.text:
        detail = ""
        if c.char_start is not None and source.text[c.char_start : c.char_end] != hit.text:
            start = source.offsets[c.line_start - 1]
            detail = f"an earlier line changed: characters now {start}-{start + len(hit.text)}"
        return CitationCheck(**base, status="valid", source_hash=hash_state, detail=detail)
    if c.char_start is not None and source.text[c.char_start : c.char_end] == hit.text:
        return CitationCheck(**base, status="valid", source_hash=hash_state)  # a window not cut at lines
    found = source.find(hit.text)
    if found is not None:
        first, last, char_start = found
        detail = f"text now at lines {first}-{last}, characters {char_start}-{char_start + len(hit.text)}"
        return CitationCheck(
            **base, status="moved", source_hash=hash_state, found_line_start=first, found_line_end=last, detail=detail
        )
    return CitationCheck(
        **base,
        status="changed",
        source_hash=hash_state,
        detail=f"lines {c.line_start}-{c.line_end} no longer hold the cited text, and it is nowhere else in the file",
    )


def verify_receipt(receipt: Receipt, corpus: Path) -> VerifyReport:
    """Check every hit's citation against the files under ``corpus`` as they are now."""
    root = corpus if corpus.is_dir() else corpus.parent  # a JSONL corpus names its file
    sources: dict[str, SourceFile] = {}
    checks: list[CitationCheck] = []
    for item in receipt.evidence:
        for position, hit in enumerate(item.hits):
            path = hit.custody.source_path or ""
            if path not in sources:
                sources[path] = SourceFile(root, path)
            checks.append(check_hit(hit, sources[path], evidence=item.key, position=position))
    counts = Counter(c.status for c in checks)
    return VerifyReport(
        corpus=str(corpus),
        counts={s: counts.get(s, 0) for s in ("valid", "moved", "changed", "missing")},
        citations=tuple(checks),
    )


def cited_place(source_path: str | None, line_start: int | None, line_end: int | None) -> str:
    """Where a citation points, as far as its custody knows: ``path:first-last``, the path
    alone when the source has no line span, ``(no source path)`` when it has no path."""
    where = source_path if source_path is not None else "(no source path)"
    if line_start is None or line_end is None:
        return where if source_path is None else f"{where} (no line span)"
    return f"{where}:{line_start}-{line_end}"


def verify_text(report: VerifyReport) -> str:
    """One line per citation that no longer holds, then the counts."""
    out = []
    for c in report.citations:
        if c.status == "valid" and c.source_hash == "same":
            continue
        where = cited_place(c.source_path, c.line_start, c.line_end)
        note = f" ({c.detail})" if c.detail else ""
        hashed = "" if c.status != "valid" else " (file hash differs; the cited lines are intact)"
        out.append(f"{c.status:<8} {where}  {c.chunk_id} [{c.rsc}] hit {c.hit} of {c.evidence}{note}{hashed}")
    counts = ", ".join(f"{n} {s}" for s, n in report.counts.items())
    out.append(f"{len(report.citations)} citations: {counts}")
    return "\n".join(out) + "\n"
