"""The real-text fixture (``fixtures/realtext/``, see its README): Debian packaging text, its
chunks and their committed float32 vectors, and an index built from them without embedding.

``StoredEmbedder`` answers ``embed`` for the fixture's chunk texts with the committed vectors
(the model's own bits: a test re-embeds a sample and compares), under the model's identity,
so the index it builds is the one ``race index`` would build, and opens with the model for
query embedding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from backends.models.embedding import EmbedderIdentity

ROOT: Final = Path(__file__).resolve().parent.parent / "fixtures" / "realtext"
CORPUS: Final = ROOT / "corpus"
CHUNKS: Final = ROOT / "chunks.jsonl"
VECTORS: Final = ROOT / "vectors.npy"
IDENTITY: Final = ROOT / "embedder.json"


@dataclass(frozen=True)
class StoredChunks:
    ids: tuple[str, ...]
    texts: tuple[str, ...]
    vectors: npt.NDArray[np.float32]
    identity: EmbedderIdentity


def stored_chunks() -> StoredChunks:
    lines = [json.loads(line) for line in CHUNKS.read_text(encoding="utf-8").splitlines() if line]
    vectors = np.load(VECTORS)
    identity = EmbedderIdentity.model_validate_json(IDENTITY.read_text(encoding="utf-8"))
    if vectors.dtype != np.float32 or vectors.shape != (len(lines), identity.dims):
        raise ValueError(f"{VECTORS}: {vectors.shape} {vectors.dtype}, not {len(lines)} x {identity.dims} float32")
    return StoredChunks(
        ids=tuple(str(r["chunk_id"]) for r in lines),
        texts=tuple(str(r["text"]) for r in lines),
        vectors=vectors,
        identity=identity,
    )


class StoredEmbedder:
    """The committed vectors of the fixture's chunk texts; any other text is refused."""

    def __init__(self, chunks: StoredChunks | None = None) -> None:
        self._chunks = chunks or stored_chunks()
        self._row = {text: i for i, text in enumerate(self._chunks.texts)}

    @property
    def identity(self) -> EmbedderIdentity:
        return self._chunks.identity

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = next((t for t in texts if t not in self._row), None)
        if missing is not None:
            raise KeyError(f"{CHUNKS}: no committed vector for the text {missing[:60]!r}")
        rows = [self._row[t] for t in texts]
        if not rows:
            return np.zeros((0, self.identity.dims), np.float32)
        out: npt.NDArray[np.float32] = self._chunks.vectors[rows]
        return out


def build_realtext_index(out: Path) -> Path:
    """``race index`` of the fixture corpus into ``out``, vectors from the committed file."""
    from race.indexing.indexing import build_index

    build_index(CORPUS, out, embedder=StoredEmbedder())
    return out
