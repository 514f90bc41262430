"""Query vectors: the embedder an index's queries go through (``BuiltWith``, checked against
the identity the index's vectors were built with), the vectors kept per query text
(``QueryVectors``), and a caller's own vector taken only where its embedder is the index's."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from backends.models.embedding import Embedder
from backends.models.encoder import FloatArray
from rsc import BackendUnavailable, EmbedderIdentity, IndexMissingError, InputError, Query


class BuiltWith:
    """The embedder an index's queries go through, checked against the identity its vectors were
    built with (``built_with``, from the index manifest) once, at the first embedding. Opening an
    index therefore neither loads nor hashes the model: a plan with no vector leg never needs
    it. Other weights fail that first use, and every later one, with an ``IndexMissingError``
    naming both identities, which the leg reports as its gap; ``race index`` checks at build."""

    def __init__(self, embedder: Embedder, built_with: EmbedderIdentity, *, where: str, hint: str) -> None:
        self._embedder = embedder
        self._built_with = built_with
        self._where = where
        self._hint = hint
        self._checked = False
        self._lock = threading.Lock()

    def _check(self) -> None:
        with self._lock:
            if self._checked:
                return
            actual = self._embedder.identity
            if actual != self._built_with:
                # Query vectors from other weights would be compared against these silently.
                raise IndexMissingError(
                    f"the vectors were built with {self._built_with.name} ({self._built_with.weights_sha256}), "
                    f"but this process embeds with {actual.name} ({actual.weights_sha256}); {self._hint}",
                    where=self._where,
                )
            self._checked = True

    @property
    def identity(self) -> EmbedderIdentity:
        self._check()
        return self._built_with

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self._check()
        return self._embedder.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        self._check()
        return embed_queries(self._embedder, texts)


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> FloatArray:
    """Query texts as the embedder wants them: with a folder model's query prefix
    (``embed_queries``), through ``embed`` for an embedder without one."""
    method = getattr(embedder, "embed_queries", None)
    out: FloatArray = method(texts) if method is not None else embedder.embed(texts)
    return out


class QueryVectors:
    """Query embeddings kept per text (the most recent ``size``), so that the sorted and random
    reads of one obligation embed its query once. ``vector`` says whether it embedded just now:
    that is the model call the runtime counts (I10). Concurrent callers with one text wait for
    one embedding. The embedder gives the same bits on every thread, so a kept vector is the one
    a new call would compute."""

    def __init__(self, embedder: Embedder, size: int = 256) -> None:
        self._embedder = embedder
        self._size = size
        self._kept: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Lock] = {}

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def vector(self, text: str) -> tuple[npt.NDArray[np.float32], bool]:
        with self._lock:
            kept = self._kept.get(text)
            if kept is not None:
                self._kept.move_to_end(text)
                return kept, False
            pending = self._pending.setdefault(text, threading.Lock())
        with pending:
            with self._lock:
                kept = self._kept.get(text)
            if kept is not None:
                return kept, False
            vector: npt.NDArray[np.float32] = np.asarray(embed_queries(self._embedder, [text])[0], dtype=np.float32)
            vector.setflags(write=False)
            with self._lock:
                self._kept[text] = vector
                self._pending.pop(text, None)
                while len(self._kept) > self._size:
                    self._kept.popitem(last=False)
        return vector, True

    def for_query(
        self, query: Query, identity: EmbedderIdentity, *, where: str
    ) -> tuple[npt.NDArray[np.float32], bool]:
        """The query's vector for an index whose vectors came from ``identity``, and whether it
        was embedded just now: the caller's own ``vector`` when its embedder is that one (no
        model call), an ``InputError`` naming both identities when it is another, else the
        embedding of the query text."""
        if query.vector is not None:
            if query.embedder != identity:
                assert query.embedder is not None
                raise InputError(
                    f"the query's vector comes from {query.embedder.describe()}, but this index's vectors come from "
                    f"{identity.describe()}; a vector is only compared with vectors of its own embedder",
                    where=where,
                )
            given = np.asarray(query.vector, dtype=np.float32)
            given.setflags(write=False)
            return given, False
        text = (query.text or "").strip()
        if not text:
            raise BackendUnavailable("a vector scan needs query text or a caller vector", where=where)
        return self.vector(text)
