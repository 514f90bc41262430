"""The bundled fixture corpus, and its index cached under the user's cache directory.

Whether the cached index is fresh is decided from a stamp beside it
(``fixture-index.corpus.json``): a digest of the corpus files and where they are (receipts
name the corpus root), of the code that builds an index (``race.indexing.provenance``: the
contracts, kept facts and calibration it writes) and of the RACE version. A matching stamp opens
the cached index without importing the ingest and indexing modules (a cold
``race run --index bundled`` pays for neither); a missing or stale stamp checks the index (same
corpus revision, same root, built by this code, complete), rebuilds it otherwise, and writes the
stamp afresh. The stamp also holds the digest of the index's manifest, so an index rebuilt since
(by another version sharing the cache) is checked again, and it is written only for a complete
index: one built without the embedding model is lexical only and is checked, and completed, at
the next start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from race.indexing.provenance import build_code_digest, tree_digest
from race.version import __version__


def _fixtures() -> Path:
    # An installed wheel carries the fixtures as the data package race/fixtures; a source
    # checkout (or an editable install) has them in the top-level fixtures/ folder.
    race = Path(__file__).resolve().parents[1]
    packaged = race / "fixtures"
    return packaged if packaged.is_dir() else race.parent / "fixtures"


FIXTURES = _fixtures()
BUNDLED_CORPUS = FIXTURES / "corpus"
SHOWCASE_PLAN = FIXTURES / "plans" / "showcase.json"
STAMP_SCHEMA = "race.fixture-index-stamp/2"
_log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    if "RACE_CACHE_DIR" in os.environ:
        return Path(os.environ["RACE_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "race"


def bundled_index_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / "fixture-index"


def stamp_path(index_dir: Path) -> Path:
    """The stamp beside a cached index: ``fixture-index`` -> ``fixture-index.corpus.json``."""
    return index_dir.with_name(index_dir.name + ".corpus.json")


def corpus_stamp(corpus: Path) -> dict[str, str]:
    """What a cached index of ``corpus`` is fresh for: its files and root, the code that builds
    an index, the version."""
    return {
        "schema_version": STAMP_SCHEMA,
        "corpus_files": tree_digest(corpus),
        "corpus_root": str(corpus.resolve()),
        "build_code": build_code_digest(),
        "race_version": __version__,
    }


def _manifest_digest(target: Path) -> str | None:
    """sha256 of the cached index's manifest: ties a stamp to the index it was written for."""
    from race.indexing.indexing import MANIFEST

    try:
        return "sha256:" + hashlib.sha256((target / MANIFEST).read_bytes()).hexdigest()
    except OSError:
        return None


def _stamp_matches(target: Path, stamp: dict[str, str]) -> bool:
    try:
        recorded = json.loads(stamp_path(target).read_bytes())
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or recorded.pop("manifest", None) != _manifest_digest(target):
        return False  # the index was rebuilt (by another version, say) since the stamp was written
    return bool(recorded == stamp)


def _write_stamp(target: Path, stamp: dict[str, str]) -> None:
    """Best effort: a stamp that cannot be written (a read-only cache) only costs the next
    start the check it saves."""
    manifest = _manifest_digest(target)
    if manifest is None:
        return
    path = stamp_path(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps({**stamp, "manifest": manifest}, sort_keys=True, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        _log.debug("bundled index stamp not written at %s: %s", path, exc)


def ensure_bundled_index(cache_dir: Path | None = None, *, quiet: bool = True) -> Path:
    """The bundled fixture corpus indexed into the cache dir; rebuilt when the corpus changed."""
    target = bundled_index_dir(cache_dir)
    stamp = corpus_stamp(BUNDLED_CORPUS)
    if _stamp_matches(target, stamp):
        return target
    from backends import load_corpus
    from race.indexing.indexing import build_index, read_manifest

    stamp_path(target).unlink(missing_ok=True)  # a build killed half-way leaves no stamp
    revision = load_corpus(BUNDLED_CORPUS).revision
    built = {"corpus_revision": revision, "corpus_root": stamp["corpus_root"], "build_code": stamp["build_code"]}
    try:
        manifest = read_manifest(target)
        # Built from this corpus, where it is now, by this code: another checkout's index names
        # its files in every receipt, and another version's carries its contracts and facts.
        fresh = all(manifest.get(key) == value for key, value in built.items()) and _complete(target)
    except Exception:  # no index yet, or one this version cannot read: built afresh below
        fresh = False
    if fresh:
        _write_stamp(target, stamp)
        return target
    if not quiet:
        print(f"indexing the bundled fixture corpus into {target}", file=sys.stderr)
    # Without the embedding model the index is lexical only (a cold start), and the notice says so.
    build_index(BUNDLED_CORPUS, target, notice=None if quiet else _notice)
    if _complete(target):  # a lexical-only build (no model installed) is checked again next time
        _write_stamp(target, stamp)
    return target


def _notice(text: str) -> None:
    print(f"race: notice: {text}", file=sys.stderr)


def _complete(index_dir: Path) -> bool:
    from backends import LOCAL_ADAPTERS
    from race.indexing.indexing import read_manifest

    manifest = read_manifest(index_dir)
    built = manifest.get("backends")
    calibrated = (index_dir / "lancedb" / "calibration.json").exists()
    # An index from before manifests recorded the corpus root is rebuilt: receipts carry the root.
    complete = isinstance(built, list) and all(a.backend in built for a in LOCAL_ADAPTERS) and calibrated
    return complete and "corpus_root" in manifest
