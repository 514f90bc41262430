"""Building the LanceDB table: chunk rows in the table's schema, the IVF index (partitions and
probes sized to the table) and a scalar index on every filterable field."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from lancedb.index import Bitmap, BTree, IvfFlat, LabelList

from backends.base import Progress
from backends.generated import schema_json
from backends.ingest.corpus import Chunk, Corpus
from backends.ingest.schema import CorpusSchema, FieldType, datetime_micros, default_schema
from backends.lancedb.exact import EXACT_DIR
from backends.lancedb.matrix_store import MatrixStore
from backends.lancedb.query import (
    _CHUNK_COLUMNS,
    _CHUNK_FIELDS,
    ANN_MIN_NPROBES,
    ANN_PROBE_SHARE,
    IDENTITY_FIELDS,
    MANIFEST,
    TABLE,
    VECTOR,
    VECTOR_INDEX,
)
from backends.models.embed_batch import Parallel, embed_distinct, text_key
from backends.models.embedding import Embedder
from backends.models.folder import embedder_token_counter, source_of
from rsc import Contract, EmbedderIdentity, fingerprint

_COLUMN_TYPES: Final = {
    FieldType.KEYWORD: pa.string(),
    FieldType.KEYWORDS: pa.list_(pa.string()),
    FieldType.DATE: pa.string(),
    FieldType.DATETIME: pa.int64(),
    FieldType.INTEGER: pa.int64(),
    FieldType.FLOAT: pa.float64(),
    FieldType.BOOLEAN: pa.bool_(),
}
"""The column of each schema type. Dates are ISO strings (string order is date order);
datetimes microseconds since the epoch, so that instants compare as numbers."""


def _scalar_index(kind: FieldType | None) -> BTree | Bitmap | LabelList:
    """High-cardinality or range-queried fields get a BTREE, small keyword vocabularies a BITMAP,
    multi-valued keywords a LABEL_LIST (which serves ``array_has_any``)."""
    if kind is None or kind in (FieldType.DATE, FieldType.DATETIME, FieldType.INTEGER, FieldType.FLOAT):
        return BTree()
    return LabelList() if kind is FieldType.KEYWORDS else Bitmap()


def ann_partitions(rows: int) -> int:
    """IVF partitions for a table of ``rows``: sqrt(rows), LanceDB's own default.

    At the fixture scale (~200 rows) this gives ~15 partitions of ~14 rows, so the index
    is real (queries go through ANNIvfPartition) but the 20 probes cover every partition
    and ANN answers equal the flat ones; at 100k rows it is 316 partitions of which 20
    are probed. IVF_FLAT keeps full vectors, so distances are exact and no
    refine step is needed; PQ would also need >= 256 rows to train its codebooks.
    """
    return max(1, min(4096, round(math.sqrt(rows))))


def ann_nprobes(partitions: int) -> int:
    return max(ANN_MIN_NPROBES, math.ceil(partitions / ANN_PROBE_SHARE))


def ann_index_config(rows: int) -> IvfFlat:
    return IvfFlat(distance_type="cosine", num_partitions=ann_partitions(rows))


ANN_PROFILE: Final = (
    f"lancedb IVF_FLAT cosine, partitions=round(sqrt(rows)), nprobes=max({ANN_MIN_NPROBES}, "
    f"partitions/{ANN_PROBE_SHARE}) widened until k filtered rows are found, prefilter via BITMAP/BTREE "
    "scalar indexes"
)


def chunk_text(chunk: Chunk) -> str:
    """What a chunk's vector embeds: title, section heading and body."""
    return "\n".join(part for part in (chunk.title, chunk.section, chunk.text) if part)


def _schema(dims: int, corpus_schema: CorpusSchema) -> pa.Schema:
    fields = [
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("section", pa.string()),
        pa.field("text", pa.string()),
        pa.field("source_path", pa.string()),
        pa.field("line_start", pa.int64()),
        pa.field("line_end", pa.int64()),
        pa.field("char_start", pa.int64()),
        pa.field("char_end", pa.int64()),
        pa.field("source_hash", pa.string()),
        pa.field("corpus_revision", pa.string()),
        pa.field("metadata_json", pa.string()),
        *[pa.field(name, _COLUMN_TYPES[spec.type]) for name, spec in corpus_schema.filterable().items()],
        pa.field(VECTOR, pa.list_(pa.float32(), dims)),
    ]
    return pa.schema(fields)


def chunk_rows(
    chunks: Sequence[Chunk],
    vectors: npt.NDArray[np.float32],
    corpus_revision: str,
    dims: int,
    corpus_schema: CorpusSchema | None = None,
) -> pa.Table:
    """Arrow rows for chunks and their vectors, in the table's schema."""
    corpus_schema = corpus_schema or default_schema()
    fields = corpus_schema.filterable()
    columns: dict[str, list[Any]] = {name: [] for name in _CHUNK_COLUMNS}
    for name in fields:
        columns[name] = []
    for chunk in chunks:
        for name in _CHUNK_FIELDS:
            columns[name].append(getattr(chunk, name))
        columns["corpus_revision"].append(corpus_revision)
        columns["metadata_json"].append(json.dumps(chunk.metadata, sort_keys=True))
        for name, spec in fields.items():
            value = chunk.metadata.get(name)
            if value is not None and spec.type is FieldType.DATETIME:
                value = datetime_micros(str(value))
            columns[name].append(list(value) if isinstance(value, tuple) else value)
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
    schema = _schema(dims, corpus_schema)
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema if f.name != VECTOR]
    arrays.append(pa.FixedSizeListArray.from_arrays(flat, dims))
    return pa.Table.from_arrays(arrays, schema=schema)


def _truncation(chunks: Sequence[Chunk], embedder: Embedder) -> tuple[dict[str, dict[str, int]], int | None]:
    """Tokens of each chunk the model does not read (doc id -> chunk id -> tokens), counted
    with the model's own tokenizer; unknown (empty, ``None``) for another embedder."""
    counter = embedder_token_counter(embedder)
    if counter is None:
        return {}, None
    out: dict[str, dict[str, int]] = {}
    total = 0
    for chunk in chunks:
        n = counter.count(chunk_text(chunk)) + counter.specials
        total += n
        if n > counter.max_tokens:
            out.setdefault(chunk.doc_id, {})[chunk.chunk_id] = n - counter.max_tokens
    return out, total


def embed_chunks(
    chunks: Sequence[Chunk],
    embedder: Embedder,
    progress: Progress | None = None,
    *,
    known: dict[str, npt.NDArray[np.float32]] | None = None,
    parallel: Parallel = "auto",
) -> tuple[npt.NDArray[np.float32], int]:
    """The vector of every chunk and how many texts were embedded: each distinct ``chunk_text``
    once (copies share its vector), none already in ``known`` (text key -> vector)."""
    return embed_distinct([chunk_text(c) for c in chunks], embedder, known=known, parallel=parallel, progress=progress)


def build_table(
    corpus: Corpus, path: Path, progress: Progress | None, embedder: Embedder, *, parallel: Parallel = "auto"
) -> CorpusSchema:
    """Embed the corpus and write the table, its indexes, exact matrix and ``race.json`` under
    ``path`` (replaced if it exists); the corpus schema the table was built with."""
    identity = embedder.identity
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    vectors, embedded = embed_chunks(corpus.chunks, embedder, progress, parallel=parallel)
    db = lancedb.connect(str(path))
    table = db.create_table(
        TABLE, chunk_rows(corpus.chunks, vectors, corpus.revision, identity.dims, corpus.corpus_schema)
    )
    finish_table(table, corpus, path, embedder, embedded=embedded)
    return corpus.corpus_schema


def update_table(
    corpus: Corpus,
    path: Path,
    progress: Progress | None,
    embedder: Embedder,
    *,
    stale: Sequence[str],
    fresh: Sequence[str],
    parallel: Parallel = "auto",
) -> int:
    """Bring the table under ``path`` to ``corpus``: delete the rows of the ``stale`` documents
    (changed or removed), merge in the chunks of the ``fresh`` ones (changed or added), with
    vectors embedded only for texts the table does not hold yet; then the indexes, matrix and
    manifest again, over the whole table. The number of texts embedded."""
    table = lancedb.connect(str(path)).open_table(TABLE)
    wanted = frozenset(fresh)
    chunks = [c for c in corpus.chunks if c.doc_id in wanted]
    # Read before the delete: a changed document's unchanged chunks keep their vectors.
    known = _vectors_by_text(table) if chunks else {}
    if stale:
        table.delete(f"doc_id IN ({', '.join(_sql_string(d) for d in sorted(stale))})")
    vectors, embedded = embed_chunks(chunks, embedder, progress, known=known, parallel=parallel)
    dims = embedder.identity.dims
    if chunks:
        rows = chunk_rows(chunks, vectors, corpus.revision, dims, corpus.corpus_schema)
        table.merge_insert("chunk_id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
    # Every row's custody names the corpus revision it was indexed under: the new one.
    table.update(values={"corpus_revision": corpus.revision})
    # The copy being updated is read by nobody yet: compact its fragments and drop the files
    # only older versions use, so updates do not pile up copies of the table.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0\)")
        table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
    finish_table(table, corpus, path, embedder, embedded=embedded)
    return embedded


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _vectors_by_text(table: Any) -> dict[str, npt.NDArray[np.float32]]:
    """The table's vectors by the key of the text each embeds."""
    data = table.to_arrow().select(["title", "section", "text", VECTOR])
    titles, sections, texts = (data.column(n).to_pylist() for n in ("title", "section", "text"))
    matrix = np.asarray(data.column(VECTOR).combine_chunks().flatten(), dtype=np.float32).reshape(len(titles), -1)
    out: dict[str, npt.NDArray[np.float32]] = {}
    for n, parts in enumerate(zip(titles, sections, texts, strict=True)):
        out.setdefault(text_key("\n".join(p for p in parts if p)), matrix[n])
    return out


def with_embedder(contracts: Sequence[Contract], identity: EmbedderIdentity) -> tuple[Contract, ...]:
    """The contracts of a table whose vectors come from ``identity``: cosine similarities of one
    model are comparable across its tables, never with another model's, so the score
    calibration names a folder model's identity (MiniLM's contracts keep their calibration)."""
    if identity.config_sha256 is None:
        return tuple(contracts)
    suffix = f"{identity.name}:{fingerprint(identity)}"
    return tuple(
        c.model_copy(update={"score_calibration": f"{c.score_calibration}:{suffix}"}) if c.score_calibration else c
        for c in contracts
    )


def finish_table(table: Any, corpus: Corpus, path: Path, embedder: Embedder, *, embedded: int) -> None:
    """The vector index, the scalar indexes, the exact matrix and ``race.json`` of a table that
    holds every chunk of ``corpus``; ``embedded`` texts were embedded to get there."""
    identity = embedder.identity
    chunks = corpus.chunks
    truncated, tokens = _truncation(chunks, embedder)
    schema = corpus.corpus_schema
    # Column positionally: LanceDB 0.40 misreads `column=` together with `config=`.
    table.create_index(VECTOR, config=ann_index_config(len(chunks)), name=VECTOR_INDEX, replace=True)
    for name in IDENTITY_FIELDS:
        table.create_index(name, config=_scalar_index(None), replace=True)
    for name, spec in schema.filterable().items():
        table.create_index(name, config=_scalar_index(spec.type), replace=True)
    MatrixStore(path / EXACT_DIR, path / f"{TABLE}.lance" / "_versions").build(table)
    manifest = {
        "corpus_revision": corpus.revision,
        "embedder": identity.model_dump(mode="json"),
        "schema": schema_json(schema),
        "table": TABLE,
        # Texts the model embedded in the build (or update) that wrote this table: each
        # distinct text once.
        "embedded_texts": embedded,
        # Text the model did not read, by document: chunk id -> tokens past its window.
        "text_tokens": tokens,
        "truncated": truncated,
        "ann_index": {
            "type": "IVF_FLAT",
            "distance": "cosine",
            "num_partitions": ann_partitions(len(chunks)),
            "nprobes": ann_nprobes(ann_partitions(len(chunks))),
            "trained_rows": len(chunks),
        },
    }
    source = source_of(embedder)
    if source is not None:
        # What opens the embedder again; MiniLM's manifests (and their digests) stay as they were.
        manifest["embedder_source"] = source
    (path / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1), encoding="utf-8")
