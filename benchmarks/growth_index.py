"""The indexes of ``benchmarks.bench_growth``: real-text chunks with synthetic vectors, written in
the layout RACE's adapters open, at any number of rows, without embedding anything.

Text. Paragraphs are read from text on this machine that nobody on the project wrote: the
licences under ``/usr/share/common-licenses``, the plain-text files and gzipped changelogs
under ``/usr/share/doc`` and the docstrings of the Python standard library, every file list
sorted. A chunk is one to three paragraphs drawn with a seeded generator, cut to 600
characters, so that tantivy indexes real word statistics (Zipf-like vocabulary, real
document lengths) at every scale.

Vectors. 384-d float32 unit vectors from one fixed Gaussian mixture (``Mixture`` of
``bench_filtered_vectors``: latent clusters projected up, noise, normalized), the same at
every scale. Rows are made in blocks of 10k, block ``b`` from ``default_rng([seed, b])``, so
the 10k table is the first block of the 100k one, which is the first tenth of the 1M one.
Queries are fresh draws from the same mixture: ``SyntheticEmbedder`` maps a query text to a
vector seeded by the text's hash. It is the benchmark's query-vector source only, and its
identity says so; the vectors never come from the model.

Layout. The tantivy index is written by ``TantivyAdapter.build`` itself, fed chunks lazily
(a corpus record whose chunk sequence is generated as it is read). The LanceDB table is
written block by block in the schema ``backends.lancedb.build.chunk_rows`` makes, then given
what ``build_table`` gives a table (IVF_FLAT index sized to the table, scalar indexes, the
exact matrix, ``race.json``, generated contracts) without holding a million rows in memory.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import math
import re
import shutil
import sysconfig
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, cast, overload

import lancedb
import numpy as np
import pyarrow as pa
import xxhash

from backends.generated import generate_contracts, schema_json, write_contracts
from backends.ingest.corpus import Chunk, Corpus
from backends.ingest.schema import default_schema, schema_document
from backends.lancedb.adapter import LanceAdapter
from backends.lancedb.build import _scalar_index, ann_index_config, ann_nprobes, ann_partitions, chunk_rows
from backends.lancedb.exact import EXACT_DIR
from backends.lancedb.matrix import SCHEMA_VERSION as MATRIX_SCHEMA
from backends.lancedb.matrix_store import MatrixStore
from backends.lancedb.query import IDENTITY_FIELDS, MANIFEST, TABLE, VECTOR, VECTOR_INDEX
from backends.models.embedding import EmbedderIdentity, FloatArray
from backends.tantivy.adapter import TantivyAdapter
from benchmarks.bench_filtered_vectors import DIMS, LATENT_DIMS, Mixture
from race.indexing.indexing import INDEX_SCHEMA_VERSION
from race.indexing.indexing import MANIFEST as INDEX_MANIFEST
from race.indexing.indexing import SCHEMA as INDEX_SCHEMA
from rsc import fingerprint

BLOCK = 10_000
CLUSTERS = 500
MAX_CHARS = 600
READ_BYTES = 32_768
PER_FILE = 40
"""At most this many paragraphs of one file (the first ones), read from its first 32 KiB: no
one package's changelog dominates the vocabulary."""
DOC_TYPES = tuple(f"type{i}" for i in range(10))
"""``doc_type`` takes one of ten values, uniformly: a filter on one selects about 10 %."""
CHUNKS_PER_DOC = 4
LAYOUT_VERSION = "race.bench.growth/1"
STUB_NAME = "bench-growth/synthetic-mixture (no model: seeded query vectors)"

_WORD = re.compile(r"[A-Za-z][a-z]{3,14}")
_SPACE = re.compile(r"\s+")


# -- real text ---------------------------------------------------------------------------------


def _paragraphs(text: str) -> Iterator[str]:
    for block in re.split(r"\n\s*\n", text):
        flat = _SPACE.sub(" ", block).strip()
        # Paragraphs of prose: long enough, mostly letters (not tables, hex dumps, code).
        if len(flat) >= 80 and sum(c.isalpha() or c == " " for c in flat) >= 0.8 * len(flat):
            yield flat[:MAX_CHARS]


def _read(path: Path) -> str:
    """The first ``READ_BYTES`` of a file (of a gzipped file, of its content)."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path) as stream:
                data = stream.read(READ_BYTES)
        else:
            with path.open("rb") as stream:
                data = stream.read(READ_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""
    return data.decode("utf-8", errors="replace")


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def text_sources() -> list[tuple[str, str]]:
    """(source path, paragraph) of every usable paragraph on this machine, in a fixed order."""
    found: list[tuple[str, str]] = []
    licences = Path("/usr/share/common-licenses")
    for path in sorted(p for p in licences.glob("*") if p.is_file()):
        found += [(str(path), p) for p in _paragraphs(_read(path))][:PER_FILE]
    doc = Path("/usr/share/doc")
    for path in sorted(p for p in doc.rglob("*") if p.is_file() and not p.is_symlink()):
        if path.suffix in ("", ".txt", ".md", ".gz", ".Debian", ".markdown", ".rst") and path.stat().st_size < 2**21:
            found += [(str(path), p) for p in _paragraphs(_read(path))][:PER_FILE]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        found += [(str(path), p) for doc_text in _docstrings(path) for p in _paragraphs(doc_text)]
    unique: dict[str, str] = {}
    for source, paragraph in found:
        unique.setdefault(paragraph, source)  # licence boilerplate repeats across packages: once
    if len(unique) < 1000:
        raise SystemExit(f"only {len(unique)} paragraphs of real text found on this machine; need >= 1000")
    return [(source, paragraph) for paragraph, source in unique.items()]


class TextPool:
    """The paragraphs, and the query words drawn from them."""

    def __init__(self, sources: Sequence[tuple[str, str]]) -> None:
        self.sources = list(sources)
        self.digest = xxhash.xxh3_64_hexdigest("\n".join(p for _, p in self.sources).encode())

    def queries(self, n: int, seed: int) -> list[str]:
        """Three content words of a random paragraph, lower-cased: fresh texts, never a chunk."""
        rng = np.random.default_rng([seed, 0xB25])
        out: list[str] = []
        while len(out) < n:
            _, paragraph = self.sources[int(rng.integers(len(self.sources)))]
            words = sorted({w.lower() for w in _WORD.findall(paragraph)})
            if len(words) >= 3:
                picked = rng.choice(len(words), size=3, replace=False)
                out.append(" ".join(words[int(i)] for i in sorted(picked)))
        return out


# -- chunks and vectors ------------------------------------------------------------------------


def mixture(seed: int) -> Mixture:
    """The one mixture every scale draws from (``Mixture.make`` sizes it by rows; not here)."""
    rng = np.random.default_rng([seed, 0x5EED])
    sizes = np.arange(1, CLUSTERS + 1, dtype=np.float64) ** -0.8
    return Mixture(
        centers=rng.standard_normal((CLUSTERS, LATENT_DIMS)),
        weights=sizes / sizes.sum(),
        projection=rng.standard_normal((LATENT_DIMS, DIMS)) / math.sqrt(LATENT_DIMS),
        spread=0.55,
        noise=0.35 / math.sqrt(DIMS),
    )


def block_chunks(pool: TextPool, block: int, seed: int) -> list[Chunk]:
    rng = np.random.default_rng([seed, block, 1])
    picks = rng.integers(len(pool.sources), size=(BLOCK, 3))
    parts = rng.integers(1, 4, size=BLOCK)
    types = rng.integers(len(DOC_TYPES), size=BLOCK)
    chunks = []
    for i in range(BLOCK):
        row = block * BLOCK + i
        chosen = [pool.sources[int(j)] for j in picks[i, : parts[i]]]
        text = "\n\n".join(p for _, p in chosen)[: 2 * MAX_CHARS]
        source = chosen[0][0]
        doc = row // CHUNKS_PER_DOC
        chunks.append(
            Chunk(
                chunk_id=f"c{row:07d}",
                doc_id=f"d{doc:07d}",
                title=Path(source).parent.name or Path(source).name,
                section=Path(source).name,
                text=text,
                source_path=f"synthetic/{doc:07d}.txt",
                line_start=1 + 3 * (row % CHUNKS_PER_DOC),
                line_end=3 + 3 * (row % CHUNKS_PER_DOC),
                char_start=0,
                char_end=len(text),
                source_hash="sha256:" + hashlib.sha256(text.encode()).hexdigest(),
                metadata={"doc_type": DOC_TYPES[int(types[i])]},
            )
        )
    return chunks


def block_vectors(mix: Mixture, block: int, seed: int) -> FloatArray:
    return mix.sample(BLOCK, np.random.default_rng([seed, block, 2]))


class LazyChunks(Sequence[Chunk]):
    """The chunks of ``blocks``, made one block at a time as they are read."""

    def __init__(self, pool: TextPool, blocks: Sequence[int], seed: int) -> None:
        self._pool, self._blocks, self._seed = pool, list(blocks), seed
        self._block: tuple[int, list[Chunk]] | None = None

    def __len__(self) -> int:
        return len(self._blocks) * BLOCK

    @overload
    def __getitem__(self, index: int) -> Chunk: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Chunk]: ...
    def __getitem__(self, index: int | slice) -> Chunk | Sequence[Chunk]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(index)
        block = self._blocks[index // BLOCK]
        if self._block is None or self._block[0] != block:
            self._block = (block, block_chunks(self._pool, block, self._seed))
        return self._block[1][index % BLOCK]

    def __iter__(self) -> Iterator[Chunk]:
        for block in self._blocks:
            yield from block_chunks(self._pool, block, self._seed)


class SyntheticEmbedder:
    """Query vectors for the synthetic tables: a fresh draw from the tables' mixture, seeded by
    the text's hash (the same text, the same vector). Not a model; used for nothing else."""

    def __init__(self, mix: Mixture, seed: int) -> None:
        self._mix, self._seed = mix, seed

    @cached_property
    def identity(self) -> EmbedderIdentity:
        return EmbedderIdentity(name=STUB_NAME, dims=DIMS, weights_sha256=f"seed:{self._seed}:clusters:{CLUSTERS}")

    def embed(self, texts: Sequence[str]) -> FloatArray:
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        for i, text in enumerate(texts):
            rng = np.random.default_rng([self._seed, xxhash.xxh3_64_intdigest(text.encode())])
            out[i] = self._mix.sample(1, rng)[0]
        return out


# -- the index directory -----------------------------------------------------------------------


def params_of(blocks: Sequence[int], seed: int, pool: TextPool) -> dict[str, Any]:
    rows = len(blocks) * BLOCK
    params: dict[str, Any] = {
        "layout": LAYOUT_VERSION,
        "rows": rows,
        "seed": seed,
        "block": BLOCK,
        "clusters": CLUSTERS,
        "text": pool.digest,
        "paragraphs": len(pool.sources),
    }
    if list(blocks) != list(range(len(blocks))):
        params["blocks"] = list(blocks)
    return params


def shard_blocks(rows: int, shards: int) -> list[list[int]]:
    """The blocks of shard ``i`` of ``shards``: every ``shards``-th block of the ``rows`` table,
    so the shards together hold exactly its rows."""
    return [list(range(i, rows // BLOCK, shards)) for i in range(shards)]


def ensure_index(folder: Path, blocks: Sequence[int], seed: int, pool: TextPool, log: Any = print) -> dict[str, float]:
    """Build the index of ``blocks`` in ``folder`` unless the one there has the same
    parameters (then only its exact matrix is rebuilt, if it is of another format than the
    one this code reads); the seconds each part took (empty when reused as it is)."""
    import time

    rows = len(blocks) * BLOCK
    params = params_of(blocks, seed, pool)
    stamp = folder / "bench-growth.json"
    if stamp.exists() and json.loads(stamp.read_text()) == params:
        return _refresh_matrix(folder / LanceAdapter.backend, log)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    schema = default_schema()
    revision = fingerprint(params)
    chunks = LazyChunks(pool, blocks, seed)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    # A corpus record whose chunks are made as the build reads them (never all in memory).
    lazy = cast("tuple[Chunk, ...]", chunks)
    corpus = Corpus.model_construct(root="synthetic", revision=revision, chunks=lazy, edges=(), corpus_schema=schema)
    TantivyAdapter.build(corpus, folder)
    seconds["tantivy"] = round(time.perf_counter() - started, 1)
    log(f"  {rows} rows: tantivy {seconds['tantivy']} s")
    seconds.update(_write_lance(folder / LanceAdapter.backend, blocks, seed, pool, revision, log))
    manifest = {
        "schema_version": INDEX_SCHEMA_VERSION,
        "corpus_revision": revision,
        "chunks": rows,
        "documents": math.ceil(rows / CHUNKS_PER_DOC),
        "edges": 0,
        "backends": ["lancedb", "tantivy"],
    }
    (folder / INDEX_SCHEMA).write_text(schema_document(schema))
    (folder / INDEX_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    stamp.write_text(json.dumps(params, sort_keys=True))
    return seconds


def _refresh_matrix(path: Path, log: Any) -> dict[str, float]:
    """Rebuild the exact matrix of the table under ``path`` if the one there is not of the
    format ``backends.lancedb.matrix`` writes now (the table itself is unchanged)."""
    import time

    found = [json.loads(m.read_text()).get("schema_version") for m in (path / EXACT_DIR).glob("*/exact.json")]
    if found == [MATRIX_SCHEMA]:
        return {}
    started = time.perf_counter()
    shutil.rmtree(path / EXACT_DIR, ignore_errors=True)
    table = lancedb.connect(str(path)).open_table(TABLE)
    if MatrixStore(path / EXACT_DIR, path / f"{TABLE}.lance" / "_versions").build(table) is None:
        raise SystemExit(f"{path}: no exact matrix could be built")
    seconds = {"exact_matrix": round(time.perf_counter() - started, 1)}
    log(f"  {path}: exact matrix {found} -> {MATRIX_SCHEMA} rebuilt in {seconds['exact_matrix']} s")
    return seconds


def _write_lance(
    path: Path, blocks: Sequence[int], seed: int, pool: TextPool, revision: str, log: Any
) -> dict[str, float]:
    import time

    rows = len(blocks) * BLOCK
    schema = default_schema()
    mix = mixture(seed)
    path.mkdir(parents=True)
    db = lancedb.connect(str(path))
    started = time.perf_counter()

    def batches() -> Iterator[pa.RecordBatch]:
        for block in blocks:
            table = chunk_rows(block_chunks(pool, block, seed), block_vectors(mix, block, seed), revision, DIMS, schema)
            yield from table.to_batches()

    first = chunk_rows(block_chunks(pool, 0, seed)[:1], block_vectors(mix, 0, seed)[:1], revision, DIMS, schema)
    # The table's rows are those of the blocks, in block order; one block in memory at a time.
    table = db.create_table(TABLE, data=batches(), schema=first.schema)
    seconds = {"lancedb_rows": round(time.perf_counter() - started, 1)}
    started = time.perf_counter()
    table.create_index(VECTOR, config=ann_index_config(rows), name=VECTOR_INDEX)
    seconds["lancedb_ivf"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    for name in IDENTITY_FIELDS:
        table.create_index(name, config=_scalar_index(None))
    for name, spec in schema.filterable().items():
        table.create_index(name, config=_scalar_index(spec.type))
    seconds["lancedb_scalar"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    MatrixStore(path / EXACT_DIR, path / f"{TABLE}.lance" / "_versions").build(table)
    seconds["exact_matrix"] = round(time.perf_counter() - started, 1)
    log(f"  {rows} rows: lancedb {seconds}")
    identity = SyntheticEmbedder(mix, seed).identity
    manifest = {
        "corpus_revision": revision,
        "embedder": identity.model_dump(mode="json"),
        "schema": schema_json(schema),
        "table": TABLE,
        "text_tokens": None,
        "truncated": {},
        "ann_index": {
            "type": "IVF_FLAT",
            "distance": "cosine",
            "num_partitions": ann_partitions(rows),
            "nprobes": ann_nprobes(ann_partitions(rows)),
            "trained_rows": rows,
        },
    }
    (path / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1), encoding="utf-8")
    write_contracts(path, generate_contracts(LanceAdapter.contracts(), schema))
    return seconds
