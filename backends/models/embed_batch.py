"""Embedding a corpus's chunks for an index build: each distinct text once, in batches sorted
by token length, on every core.

Copies are common in real corpora (the same changelog entry shipped by sibling packages, a
licence pasted into every repository): a text is embedded once, keyed by the sha256 of the
text the vector index embeds, and every chunk with that text gets the same vector (each
keeps its own row and custody). The distinct texts are embedded shortest first, in batches
of ``BATCH`` texts of similar length.

Two ways to use more than one core, with the same bits either way (the encoder's products
are exact integer-grid sums, ``backends.models.encoder``, so a vector depends neither on the thread
count nor on the other texts of its batch):

- ``pool``: worker processes, each with its own copy of the model, embed whole batches;
- ``blas``: this process, with BLAS free to use every core inside each product.

``auto`` is the pool when cores are idle (by the load average) and there are enough texts to
pay for starting the workers, otherwise one process on one BLAS thread, as a query embeds:
``benchmarks/bench_indexing.py`` measures the three side by side, and the pool beats BLAS
threads (whose exact float64 products leave the element-wise work on one core) but loses to
one process when the other cores are busy. An embedder other than the model itself
(a Ray embedder, a test double) is always called in this process, with the batches.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
from threadpoolctl import threadpool_limits

from backends.models.embedding import Embedder, FloatArray, MiniLMEmbedder, compile_forward_passes

Parallel = Literal["auto", "serial", "blas", "pool"]
BATCH = 32
POOL_MIN_TEXTS = 96
"""Fewer distinct texts than this are embedded in this process: starting a worker (loading
the model) costs about as much as embedding a few dozen texts. From this many on, the model's
compiled forward pass (the extra ``fast``, the same bits) is set up first, in the workers or
here: 0.6 to 1 s once numba has compiled it on the machine."""

POOL_MIN_IDLE = 1.5
"""Idle cores (``idle_cores``) below which the pool is not worth it: two workers need two."""

Progress = Callable[[int, int], None]


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def idle_cores() -> float:
    """Cores the last minute's load left free: a worker pool on cores other processes keep
    busy is slower than one process (measured by ``benchmarks/bench_indexing.py``)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 0.0
    return max(0.0, cores() - load)


class DistinctTexts:
    """The distinct texts of a list, and for every position the index of its distinct text."""

    def __init__(self, texts: Sequence[str]) -> None:
        first: dict[str, int] = {}
        self.keys: list[str] = []
        self.texts: list[str] = []
        self.slots: list[int] = []
        for text in texts:
            key = text_key(text)
            slot = first.get(key)
            if slot is None:
                slot = first[key] = len(self.texts)
                self.keys.append(key)
                self.texts.append(text)
            self.slots.append(slot)


def _lengths(texts: Sequence[str], embedder: Embedder) -> list[int]:
    """Word pieces of each text with the model's tokenizer (characters for another embedder)."""
    if isinstance(embedder, MiniLMEmbedder):
        tokenizer = embedder._model().tokenizer
        return [len(e.ids) for e in tokenizer.encode_batch(list(texts))]
    return [len(t) for t in texts]


def length_batches(texts: Sequence[str], embedder: Embedder, size: int = BATCH) -> list[list[int]]:
    """Indices into ``texts``, shortest first (ties in input order), cut into batches."""
    lengths = _lengths(texts, embedder)
    order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))
    return [order[start : start + size] for start in range(0, len(order), size)]


def embed_distinct(
    texts: Sequence[str],
    embedder: Embedder,
    *,
    known: dict[str, FloatArray] | None = None,
    parallel: Parallel = "auto",
    progress: Progress | None = None,
) -> tuple[FloatArray, int]:
    """The vector of every text (rows in input order) and how many texts were embedded: each
    distinct text once, none whose key is in ``known`` (vectors kept from an earlier build)."""
    dims = embedder.identity.dims
    distinct = DistinctTexts(texts)
    vectors = np.empty((len(distinct.texts), dims), dtype=np.float32)
    todo = []
    for slot, key in enumerate(distinct.keys):
        kept = known.get(key) if known is not None else None
        if kept is not None:
            vectors[slot] = kept
        else:
            todo.append(slot)
    if todo:
        fresh = embed_texts([distinct.texts[s] for s in todo], embedder, parallel=parallel, progress=progress)
        vectors[todo] = fresh
    out: FloatArray = vectors[np.asarray(distinct.slots, dtype=np.intp)] if texts else np.zeros((0, dims), np.float32)
    return out, len(todo)


def embed_texts(
    texts: Sequence[str], embedder: Embedder, *, parallel: Parallel = "auto", progress: Progress | None = None
) -> FloatArray:
    """Every text embedded (no de-duplication), batched by token length, rows in input order."""
    out = np.empty((len(texts), embedder.identity.dims), dtype=np.float32)
    if not texts:
        return out
    batches = length_batches(texts, embedder)
    mode = _mode(parallel, embedder, len(texts))
    if mode != "pool" and isinstance(embedder, MiniLMEmbedder) and len(texts) >= POOL_MIN_TEXTS:
        embedder._model()  # loaded, so that its compiled path is set up
        compile_forward_passes()
    done = 0

    def put(batch: list[int], vectors: FloatArray) -> None:
        nonlocal done
        out[batch] = vectors
        done += len(batch)
        if progress:
            progress(done, len(texts))

    if mode == "pool":
        assert isinstance(embedder, MiniLMEmbedder)
        workers = min(cores(), len(batches))
        # Spawned, not forked: the parent holds LanceDB's and tantivy's threads.
        context = multiprocessing.get_context("spawn")
        start = (embedder._model_dir,)
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=start) as pool:
            shares = [[texts[i] for i in batch] for batch in batches]
            for batch, vectors in zip(batches, pool.map(_worker_embed, shares), strict=True):
                put(batch, vectors)
    elif mode == "blas":
        assert isinstance(embedder, MiniLMEmbedder)
        model = embedder._model()
        with threadpool_limits(limits=cores(), user_api="blas"):
            for batch in batches:
                put(batch, model.encode_batch([texts[i] for i in batch], model.compiled_path))
    else:
        for batch in batches:
            put(batch, embedder.embed([texts[i] for i in batch]))
    return out


def _mode(parallel: Parallel, embedder: Embedder, count: int) -> Parallel:
    own_model = type(embedder) is MiniLMEmbedder
    if parallel == "auto":
        return "pool" if own_model and count >= POOL_MIN_TEXTS and idle_cores() >= POOL_MIN_IDLE else "serial"
    if parallel in ("pool", "blas") and not own_model:
        return "serial"
    return parallel


_WORKER: MiniLMEmbedder | None = None


def _start_worker(folder: Path | None) -> None:
    global _WORKER
    _WORKER = MiniLMEmbedder(folder)
    _WORKER.embed(["warm"])
    compile_forward_passes()


def _worker_embed(texts: list[str]) -> FloatArray:
    assert _WORKER is not None
    return _WORKER.embed(texts)
