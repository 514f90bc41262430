"""Indexes RACE did not build, for the backend suites and the catalog tests: a LanceDB table and
a tantivy index made here with lancedb and tantivy directly, with column names RACE never
heard of (``doc_key``, ``body``, ``team``, ``src``, ``first_line``, ...), holding paragraphs of
the licence texts under /usr/share/common-licenses (text nobody on the project wrote), each
with its real file, line span and file hash."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

LICENSES = Path("/usr/share/common-licenses")
LICENSE_FILES = ("Apache-2.0", "BSD", "CC0-1.0", "GPL-3", "LGPL-2.1", "MPL-2.0")
PARAGRAPHS_PER_FILE = 8
TABLE = "tickets"
FULL_MAPPING = {
    "id": "doc_key",
    "text": "body",
    "path": "src",
    "line_start": "first_line",
    "line_end": "last_line",
    "hash": "digest",
}
"""The mapping of the conformance instances: every custody field has its column."""


def license_rows() -> list[dict[str, Any]]:
    """Paragraphs of a few licence files with their file, lines and file hash, in file order."""
    rows: list[dict[str, Any]] = []
    for number, name in enumerate(LICENSE_FILES):
        data = (LICENSES / name).read_bytes()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        lines = data.decode("utf-8").splitlines()
        start, kept = 0, 0
        while start < len(lines) and kept < PARAGRAPHS_PER_FILE:
            if not lines[start].strip():
                start += 1
                continue
            end = start
            while end + 1 < len(lines) and lines[end + 1].strip():
                end += 1
            body = "\n".join(lines[start : end + 1])
            if len(body) >= 120:
                rows.append(
                    {
                        "doc_key": f"{name}:{start + 1}",
                        "body": body,
                        "team": ("legal", "ops", "web")[(number + kept) % 3],
                        "prio": kept,
                        "src": str(LICENSES / name),
                        "first_line": start + 1,
                        "last_line": end + 1,
                        "digest": digest,
                    }
                )
                kept += 1
            start = end + 1
    return rows


def build_lance_table(uri: Path, rows: list[dict[str, Any]], vectors: Any) -> None:
    """Table ``tickets`` at ``uri`` with the rows and their vectors (column ``embedding``) and a
    scalar index on ``team`` only."""
    import lancedb
    import pyarrow as pa

    columns = {k: [r[k] for r in rows] for k in rows[0]}
    flat = pa.array(vectors.astype("float32").ravel())
    table = pa.table({**columns, "embedding": pa.FixedSizeListArray.from_arrays(flat, int(vectors.shape[1]))})
    from lancedb.index import BTree

    db = lancedb.connect(str(uri))
    created = db.create_table(TABLE, table, mode="overwrite")
    created.create_index("team", config=BTree())


def build_tantivy_index(path: Path, rows: list[dict[str, Any]]) -> None:
    """An index of the rows: ``team`` a raw term field, ``prio`` stored but not indexed, ``body``
    stemmed English text."""
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("doc_key", stored=True, tokenizer_name="raw")
    builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("team", stored=True, tokenizer_name="raw")
    builder.add_integer_field("prio", stored=True, indexed=False)
    builder.add_text_field("src", stored=True, tokenizer_name="raw")
    builder.add_integer_field("first_line", stored=True, indexed=False)
    builder.add_integer_field("last_line", stored=True, indexed=False)
    builder.add_text_field("digest", stored=True, tokenizer_name="raw")
    path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(builder.build(), path=str(path))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    for row in rows:
        writer.add_document(tantivy.Document(**row))
    writer.commit()
    writer.wait_merging_threads()


def build_attached_sources(root: Path) -> dict[str, Any]:
    """The rows, their vectors (the bundled MiniLM) and both sources built from them under ``root``."""
    from backends.models.embedding import MiniLMEmbedder

    rows = license_rows()
    embedder = MiniLMEmbedder()
    vectors = embedder.embed([r["body"] for r in rows])
    build_lance_table(root / "lake", rows, vectors)
    build_tantivy_index(root / "licenses", rows)
    return {"root": root, "rows": rows, "vectors": vectors, "embedder": embedder}


@pytest.fixture(scope="session")
def attached_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_attached_sources(tmp_path_factory.mktemp("attached"))


@pytest.fixture(scope="session")
def attached_lance(attached_sources: dict[str, Any]) -> Iterator[Any]:
    from backends.lancedb.attached import AttachedLanceAdapter
    from backends.mapping import FieldMapping

    yield AttachedLanceAdapter(
        name="tickets",
        uri=str(attached_sources["root"] / "lake"),
        table=TABLE,
        mapping=FieldMapping.model_validate(FULL_MAPPING),
        embedder=attached_sources["embedder"],
    )


@pytest.fixture(scope="session")
def attached_tantivy(attached_sources: dict[str, Any]) -> Iterator[Any]:
    from backends.mapping import FieldMapping
    from backends.tantivy.attached import AttachedTantivyAdapter

    yield AttachedTantivyAdapter(
        name="licenses", path=attached_sources["root"] / "licenses", mapping=FieldMapping.model_validate(FULL_MAPPING)
    )
