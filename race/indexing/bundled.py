"""The bundled fixture corpus, and its index cached under the user's cache directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from backends import LOCAL_ADAPTERS
from race.indexing.indexing import build_index, read_manifest


def _fixtures() -> Path:
    # An installed wheel carries the fixtures as the data package race/fixtures; a source
    # checkout (or an editable install) has them in the top-level fixtures/ folder.
    race = Path(__file__).resolve().parents[1]
    packaged = race / "fixtures"
    return packaged if packaged.is_dir() else race.parent / "fixtures"


FIXTURES = _fixtures()
BUNDLED_CORPUS = FIXTURES / "corpus"
SHOWCASE_PLAN = FIXTURES / "plans" / "showcase.json"


def default_cache_dir() -> Path:
    if "RACE_CACHE_DIR" in os.environ:
        return Path(os.environ["RACE_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "race"


def bundled_index_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / "fixture-index"


def ensure_bundled_index(cache_dir: Path | None = None, *, quiet: bool = True) -> Path:
    """The bundled fixture corpus indexed into the cache dir; rebuilt when the corpus changed."""
    from backends import load_corpus

    target = bundled_index_dir(cache_dir)
    revision = load_corpus(BUNDLED_CORPUS).revision
    try:
        if read_manifest(target).get("corpus_revision") == revision and _complete(target):
            return target
    except Exception:
        pass
    if not quiet:
        print(f"indexing the bundled fixture corpus into {target}", file=sys.stderr)
    # Without the embedding model the index is lexical only (a cold start), and the notice says so.
    build_index(BUNDLED_CORPUS, target, notice=None if quiet else _notice)
    return target


def _notice(text: str) -> None:
    print(f"race: notice: {text}", file=sys.stderr)


def _complete(index_dir: Path) -> bool:
    manifest = read_manifest(index_dir)
    built = manifest.get("backends")
    calibrated = (index_dir / "lancedb" / "calibration.json").exists()
    # An index from before manifests recorded the corpus root is rebuilt: receipts carry the root.
    complete = isinstance(built, list) and all(a.backend in built for a in LOCAL_ADAPTERS) and calibrated
    return complete and "corpus_root" in manifest
