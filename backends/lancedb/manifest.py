"""The files of a LanceDB index that RACE reads without LanceDB or pyarrow: its own manifest
(``race.json``), the table's version manifests and their digests, the generation made from them,
and the row counts and statistics of one table version (``snapshot.json``)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Final

import orjson

from rsc import (
    BackendStatistics,
    IndexMissingError,
    fingerprint_bytes,
)
from rsc.canonical import read_json

TABLE: Final = "chunks"
"""The LanceDB table of chunk embeddings."""
MANIFEST: Final = "race.json"
"""RACE's own manifest of the table: corpus revision, schema, embedder, ANN settings."""
FACTS: Final = "snapshot.json"
"""Row counts and statistics of one table version, by the digest of its manifest."""

_U64_MAX: Final = 2**64 - 1


def manifest_name(version: int, *, v2: bool) -> str:
    # Lance's manifest naming schemes: V2 counts down from u64::MAX so the latest lists first.
    return f"{_U64_MAX - version:020d}.manifest" if v2 else f"{version}.manifest"


def next_manifest(versions_dir: str, version: int) -> str | None:
    """Where the commit after ``version`` will put its manifest, in the scheme (V2 or V1) of the
    manifest of ``version``; ``None`` if that one is not there to tell."""
    for v2 in (True, False):
        if os.path.exists(os.path.join(versions_dir, manifest_name(version, v2=v2))):
            return os.path.join(versions_dir, manifest_name(version + 1, v2=v2))
    return None


def manifest_digest(versions_dir: str, version: int) -> str:
    """The digest (hex) of the manifest file of ``version``. Lance writes each version's manifest
    once (put-if-not-exists) and never changes it, so the digest names that version for good;
    data files are named afresh by every write, so another table's version differs."""
    for v2 in (True, False):
        try:
            with open(os.path.join(versions_dir, manifest_name(version, v2=v2)), "rb") as handle:
                return fingerprint_bytes(handle.read()).split(":", 1)[1]
        except FileNotFoundError:
            continue
    raise IndexMissingError(f"table version {version} has no manifest", where=versions_dir)


def generation_of(version: int, manifest: str, indexed: int, unindexed: int, embedder: str) -> str:
    """The generation of one table version (``LanceSnapshots.generation``)."""
    return f"lancedb:v{version}:manifest={manifest}:indexed={indexed}:unindexed={unindexed}:embedder={embedder}"


def write_facts(
    path: Path, version: int, manifest: str, counts: tuple[int, int, int], stats: BackendStatistics
) -> None:
    """Keep the row counts and statistics of table ``version`` beside the table, replacing the
    file whole. A read-only index keeps none: the handle then opens the table as before."""
    rows, indexed, unindexed = counts
    document = {
        "manifest": manifest,
        "version": version,
        "rows": rows,
        "indexed_rows": indexed,
        "unindexed_rows": unindexed,
        "statistics": stats.model_dump(mode="json"),
    }
    target = path / FACTS
    data = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    try:
        if target.read_bytes() == data:
            return
    except OSError:
        pass
    temporary = path / f".{FACTS}.{os.getpid()}.{threading.get_ident()}"
    try:
        temporary.write_bytes(data)
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_lance_manifest(path: Path) -> tuple[dict[str, Any], tuple[int, int, int]]:
    """The manifest of the LanceDB index in ``path`` (``DIR/lancedb``) and its file's stamp,
    taken before it is read (a write after that changes the stamp); a missing index or an
    unreadable manifest is ``IndexMissingError`` naming it."""
    manifest_path = path / MANIFEST
    if not manifest_path.exists() or not (path / f"{TABLE}.lance").is_dir():
        raise IndexMissingError("no LanceDB index here (run `race index`)", where=str(path))
    stamp = _stamp(manifest_path)
    manifest: dict[str, Any] = read_json(manifest_path.read_bytes(), where=str(manifest_path), error=IndexMissingError)
    return manifest, stamp


def ann_facts(manifest: dict[str, Any]) -> dict[str, float]:
    """The IVF facts the cost model counts an ANN scan's candidates with (the partitions of the
    table's vector index and the ones a scan probes), from the table's manifest."""
    ann = manifest.get("ann_index") or {}
    try:
        partitions, probes = int(ann["num_partitions"]), int(ann["nprobes"])
    except (KeyError, TypeError, ValueError):
        return {}
    return {"ann_partitions": float(partitions), "ann_probes": float(min(probes, partitions))} if partitions > 0 else {}
