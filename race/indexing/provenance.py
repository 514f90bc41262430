"""What an index was built by: a digest of the code that writes its files.

An index's contracts, kept facts and calibration are written by the code of ``backends``,
``rsc`` and ``race.indexing``; an index written by other code (another version, another checkout
sharing a cache) may hold other contracts and facts, and so plan differently. The manifest
records the digest of that code (``build_code``), and the bundled index is reused only where it
matches the running code's.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
BUILD_CODE = (_ROOT / "backends", _ROOT / "rsc", _ROOT / "race" / "indexing")
"""The trees whose Python sources and shipped contracts (JSON) write an index."""


def tree_digest(root: Path, suffixes: tuple[str, ...] | None = None) -> str:
    """sha256 over the files under ``root`` (those ending in one of ``suffixes``, if given):
    relative paths and bytes, in path order."""
    digest = hashlib.sha256()
    files = (p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in sorted(p for p in files if suffixes is None or p.suffix in suffixes):
        name = path.relative_to(root).as_posix().encode("utf-8")
        data = path.read_bytes()
        digest.update(b"%d:%s%d:" % (len(name), name, len(data)))
        digest.update(data)
    return "sha256:" + digest.hexdigest()


@cache
def build_code_digest() -> str:
    """The digest of the code that builds an index (``BUILD_CODE``), once per process: ~5 ms."""
    digest = hashlib.sha256()
    for root in BUILD_CODE:
        digest.update(tree_digest(root, (".py", ".json")).encode("ascii"))
    return "sha256:" + digest.hexdigest()
