"""Reading a corpus's files safely: which files a folder corpus holds, and each document's
bytes, refused with one line naming the file (and line) when they cannot be a document.

- A document (a ``.md``/``.txt`` file, or one JSONL line) larger than ``MAX_DOCUMENT_BYTES``
  is refused before it is read: one document that size would be cut into thousands of
  windows (the embedder reads 256 word pieces), and reading it whole is what once took GBs
  of memory. Split it into documents. A JSONL file is read one line at a time, so the limit
  is per record, not per file, and a long line is refused after reading at most the limit.
- Text must be UTF-8 (the offset of the first bad byte is named) and must not hold NUL
  bytes: a file with NUL bytes is binary, whatever its name.
- Symbolic links are followed to files; a link that leads back to itself, or a folder link
  to a folder that contains it, is a symlink loop and refused (a folder link elsewhere is
  not followed, as before); a link to nothing is refused too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from rsc import CorpusError

MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
"""The largest document (file, or JSONL record) a corpus may hold: 8 MiB."""
DOCUMENT_SUFFIXES = (".md", ".txt")


def _limit_text() -> str:
    return f"{MAX_DOCUMENT_BYTES:,} bytes ({MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB)"


def corpus_files(root: Path) -> list[Path]:
    """The ``.md``/``.txt`` files under ``root``, sorted, links checked (module docstring)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames.sort()
        for name in (*dirnames, *filenames):
            path = here / name
            if path.is_symlink():
                _check_link(path, root)
        for name in filenames:
            path = here / name
            if path.suffix in DOCUMENT_SUFFIXES and path.is_file():
                found.append(path)
    return sorted(found)


def _check_link(path: Path, root: Path) -> None:
    rel = path.relative_to(root).as_posix()
    try:
        target = path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 raises this for a loop
        raise CorpusError("symlink loop: the link leads back to itself", where=rel) from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            raise CorpusError("symlink loop: the link leads back to itself", where=rel) from None
        if path.suffix in DOCUMENT_SUFFIXES:
            raise CorpusError(f"symlink to nothing ({os.readlink(path)})", where=rel) from None
        return
    if target.is_dir() and path.parent.resolve().is_relative_to(target):
        raise CorpusError(f"symlink loop: the folder link points to {os.readlink(path)}, which holds it", where=rel)


def read_document(path: Path, where: str) -> tuple[bytes, str]:
    """A document file's bytes and text, refused when too large, not UTF-8 or binary."""
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise CorpusError(
            f"document is {size:,} bytes, over the limit of {_limit_text()} per document; split it", where=where
        )
    data = path.read_bytes()
    return data, decode_text(data, where, name_line=True)


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
