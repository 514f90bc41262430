"""Reading a corpus's files safely: which files of a folder corpus are documents, each
document's bytes, and every other file accounted for with the reason it is skipped.

- A folder corpus's file is a document when its name says a format ``backends.ingest.formats``
  reads (Markdown, plain text with or without an extension, reStructuredText, HTML); any
  other is skipped as an ``unsupported type``, one matching ``--exclude`` (or none of
  ``--include``) as ``excluded``. Nothing is skipped silently: ``Ingest`` counts every file,
  the index manifest keeps the list, and ``race index`` and ``race inspect`` print it.
- A document file larger than ``MAX_DOCUMENT_BYTES`` is skipped (``too large``) before it is
  read: one document that size would be cut into thousands of windows (the embedder reads
  256 word pieces), and reading it whole is what once took GBs of memory. A file with a NUL
  byte is ``binary``, whatever its name; one that is not UTF-8 is skipped (``not UTF-8``,
  the first bad byte named), one of white space only as ``empty``.
- Symbolic links are followed to files; a link that leads back to itself, a folder link to a
  folder that contains it, and a link to nothing are skipped (``symlink``), as is a folder
  link elsewhere (not followed).
- A JSONL corpus is read one line at a time, so the limit is per record, not per file; a
  record over it, not UTF-8 or holding a NUL byte is refused with one line naming the file
  and line (the file is the corpus: there is nothing to skip).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from backends.ingest.formats import DocumentKind, document_kind
from rsc import CorpusError, Record

MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
"""The largest document (file, or JSONL record) a corpus may hold: 8 MiB."""


def _limit_text() -> str:
    return f"{MAX_DOCUMENT_BYTES:,} bytes ({MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB)"


SKIP_REASONS = ("unsupported_type", "excluded", "symlink", "too_large", "empty", "binary", "not_utf8", "unreadable")
"""Why a file of a folder corpus is not indexed, in the order ``race index`` reports them."""


_ID_CHAR = re.compile(r"[A-Za-z0-9_.:/+~-]")


def path_id(path: str) -> str:
    """A document id from a file's path: each character outside [A-Za-z0-9_.:/+-] (a space,
    say), and ``~`` itself, written ``~XX`` (its UTF-8 bytes in hex), so any file name gives a
    valid id and two paths never give one (``a b`` is ``a~20b``, ``a~20b`` is ``a~7E20b``)."""
    return "".join(ch if ch != "~" and _ID_CHAR.match(ch) else "".join(f"~{b:02X}" for b in ch.encode()) for ch in path)


def document_ids(paths: Sequence[str]) -> dict[str, str]:
    """Each document file's id from its path in the corpus (POSIX, relative): a ``.md`` or
    ``.txt`` file's path without the extension, any other file's whole path (so ``README`` and
    ``README.Debian`` stay two documents), written by ``path_id``; and where two files would get
    one id (``git-contacts`` beside ``git-contacts.txt``, ``guide.md`` beside ``guide.txt``),
    each of them its whole path. The ids depend on the set of paths only, never on the order."""
    ids = {path: path_id(_named(path)) for path in paths}
    while True:
        counts: dict[str, int] = {}
        for doc_id in ids.values():
            counts[doc_id] = counts.get(doc_id, 0) + 1
        clashing = [path for path, doc_id in ids.items() if counts[doc_id] > 1 and doc_id != path_id(path)]
        if not clashing:
            return ids
        for path in clashing:
            ids[path] = path_id(path)


def _named(path: str) -> str:
    for suffix in (".md", ".txt"):
        if path.endswith(suffix) and path.rsplit("/", 1)[-1] != suffix:
            return path.removesuffix(suffix)
    return path


def reason_words(reason: str) -> str:
    """A skip reason as ``race index`` prints it (``not_utf8``: ``not UTF-8``)."""
    return "not UTF-8" if reason == "not_utf8" else reason.replace("_", " ")


METADATA_FILES = frozenset({"schema.json", "schema.toml", "edges.jsonl"})
"""The files at a corpus folder's root that describe the corpus: read as such, not as documents."""


class Skipped(Record):
    """One file of a folder corpus that is not indexed, and why."""

    path: str
    """The file's path in the corpus."""
    reason: str
    """One of ``SKIP_REASONS``."""
    detail: str = ""
    """What was found (the byte that is not UTF-8, the size, where a link leads)."""


class Ingest(Record):
    """Every file of a folder corpus accounted for: indexed, read as the corpus's own schema or
    edges, or skipped with its reason."""

    indexed: int = 0
    """Files indexed as documents."""
    metadata: tuple[str, ...] = ()
    """Files read as the corpus's schema or edges."""
    skipped: tuple[Skipped, ...] = ()
    """Every file not indexed, in path order."""
    include: tuple[str, ...] = ()
    """The ``--include`` globs (a file must match one), as given."""
    exclude: tuple[str, ...] = ()
    """The ``--exclude`` globs (a file matching one is skipped), as given."""

    def counts(self) -> dict[str, int]:
        """Skipped files per reason, in ``SKIP_REASONS`` order, the reasons with none left out."""
        found = {r: sum(1 for s in self.skipped if s.reason == r) for r in SKIP_REASONS}
        return {r: n for r, n in found.items() if n}

    def summary(self) -> str:
        """One line: files read, indexed, and skipped by reason."""
        total = self.indexed + len(self.metadata) + len(self.skipped)
        reasons = ", ".join(f"{n} {reason_words(r)}" for r, n in self.counts().items())
        skipped = f"{len(self.skipped)} skipped ({reasons})" if self.skipped else "0 skipped"
        meta = f", {len(self.metadata)} corpus schema/edges" if self.metadata else ""
        return f"{total} file{'s' * (total != 1)}: {self.indexed} indexed{meta}, {skipped}"


def _matches(rel: str, globs: Sequence[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(name, g) for g in globs)


def scan_folder(
    root: Path, *, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> tuple[list[tuple[Path, DocumentKind]], list[Skipped], list[str]]:
    """The document files under ``root`` with their format, sorted; the files skipped before
    reading (type, ``--include``/``--exclude``, links that loop or lead nowhere, folder links
    not followed); and the corpus's own metadata files. A glob matches the path in the corpus
    or the file's name (``fnmatch``: ``*`` crosses folders)."""
    found: list[tuple[Path, DocumentKind]] = []
    skipped: list[Skipped] = []
    metadata: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames.sort()
        for name in list(dirnames):
            path = here / name
            if path.is_symlink():
                why = _link_problem(path, root) or f"folder link to {os.readlink(path)} not followed"
                skipped.append(Skipped(path=path.relative_to(root).as_posix(), reason="symlink", detail=why))
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            kind = document_kind(name)
            if here == root and name in METADATA_FILES:
                metadata.append(rel)
            elif (exclude and _matches(rel, exclude)) or (include and not _matches(rel, include)):
                flag = "--exclude" if exclude and _matches(rel, exclude) else "--include"
                skipped.append(Skipped(path=rel, reason="excluded", detail=flag))
            elif here == root and name.lower() == "readme.md":
                skipped.append(Skipped(path=rel, reason="excluded", detail="the corpus folder's own README.md"))
            elif path.is_symlink() and (problem := _link_problem(path, root)) is not None:
                skipped.append(Skipped(path=rel, reason="symlink", detail=problem))
            elif kind is None:
                skipped.append(Skipped(path=rel, reason="unsupported_type"))
            elif not path.is_file():
                skipped.append(Skipped(path=rel, reason="unreadable", detail="not a regular file"))
            else:
                found.append((path, kind))
    return sorted(found), sorted(skipped, key=lambda s: s.path), sorted(metadata)


def _link_problem(path: Path, root: Path) -> str | None:
    """Why a symbolic link is not followed: it loops, or leads nowhere; ``None`` if it is fine."""
    try:
        target = path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 raises this for a loop
        return "symlink loop: the link leads back to itself"
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            return "symlink loop: the link leads back to itself"
        return f"symlink to nothing ({os.readlink(path)})"
    if target.is_dir() and path.parent.resolve().is_relative_to(target):
        return f"symlink loop: the folder link points to {os.readlink(path)}, which holds it"
    return None


def read_file(path: Path, rel: str) -> tuple[bytes, str] | Skipped:
    """A document file's bytes and text, or why it is skipped: too large (refused before it
    is read), empty or only white space, binary (a NUL byte), not UTF-8, unreadable."""
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            return Skipped(path=rel, reason="too_large", detail=f"{size:,} bytes, over the limit of {_limit_text()}")
        data = path.read_bytes()
    except OSError as exc:
        return Skipped(path=rel, reason="unreadable", detail=exc.strerror or type(exc).__name__)
    nul = data.find(b"\x00")
    if nul != -1:
        return Skipped(path=rel, reason="binary", detail=f"NUL byte at offset {nul}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return Skipped(path=rel, reason="not_utf8", detail=f"byte {exc.start} (line {line})")
    if not text.strip():
        return Skipped(path=rel, reason="empty")
    return data, text


def decode_text(data: bytes, where: str, *, name_line: bool = False) -> str:
    """``data`` as UTF-8 text; with ``name_line`` the place named is ``where:LINE``."""

    def place(offset: int) -> str:
        line = data.count(b"\n", 0, offset) + 1
        return f"{where}:{line}" if name_line else where

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"not UTF-8 text (byte {exc.start})", where=place(exc.start)) from None
    if "\x00" in text:
        offset = data.find(b"\x00")
        raise CorpusError(f"binary file, not text (NUL byte at offset {offset})", where=place(offset))
    return text


def jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Every line of a JSONL file as text with its 1-based number, one line in memory at a
    time; a line over the document limit, not UTF-8 or holding a NUL byte is refused."""
    if path.is_dir():
        raise CorpusError("is a directory, not a JSONL file", where=str(path))
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror or exc}", where=str(path)) from None
    with handle:
        for lineno, raw in enumerate(iter(lambda: handle.readline(MAX_DOCUMENT_BYTES + 2), b""), start=1):
            where = f"{path.name}:{lineno}"
            if len(raw.rstrip(b"\r\n")) > MAX_DOCUMENT_BYTES:
                raise CorpusError(f"record is over the limit of {_limit_text()} per document; split it", where=where)
            yield lineno, decode_text(raw, where)
