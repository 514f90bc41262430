"""The one small base every backend adapter implements, and the index-directory layout.

An adapter owns its backend's index inside ``<index dir>/<backend>/``: it builds it from a
``Corpus``, reopens it, reports its current generation, and answers ``ScanRequest``s with
``ScanResult``s whose hits carry full custody. What the backend can honestly do is not in
code but in the RSC files under ``<adapter package>/rsc/*.json``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Self

from backends.corpus import Corpus
from rsc import (
    BackendStatistics,
    Contract,
    Custody,
    Filter,
    Hit,
    ScanRequest,
    ScanResult,
    ScoreKind,
    fingerprint,
    load_contract,
)

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while an index is built."""


def load_contracts_beside(package_file: str) -> tuple[Contract, ...]:
    """Every ``rsc/*.json`` beside an adapter package's ``__init__``, sorted by id."""
    folder = Path(package_file).parent / "rsc"
    contracts = [load_contract(p) for p in sorted(folder.glob("*.json"))]
    return tuple(sorted(contracts, key=lambda c: c.rsc_id))


class Adapter(ABC):
    backend: ClassVar[str]

    @classmethod
    @abstractmethod
    def contracts(cls) -> tuple[Contract, ...]:
        """The RSCs this adapter serves."""

    @classmethod
    @abstractmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        """Build ``index_dir/<backend>`` from the corpus and return the new generation."""

    @classmethod
    @abstractmethod
    def open(cls, index_dir: Path) -> Self:
        """Open the index under ``index_dir``; a missing index is an ``IndexMissingError``."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """A stable name of this index, independent of its generation."""

    @abstractmethod
    def generation(self) -> str:
        """The current snapshot generation, read fresh (a new commit gives a new value)."""

    @abstractmethod
    async def scan(self, request: ScanRequest) -> ScanResult:
        """Answer one translated request. Blocking work goes through a worker thread."""

    def statistics(self) -> BackendStatistics:
        return BackendStatistics(backend=self.backend, rows=0)

    async def aclose(self) -> None:
        return None


def request_fingerprint(request: ScanRequest) -> str:
    return fingerprint(request)


def custody_hit(
    *,
    request: ScanRequest,
    contract_ref: str,
    chunk: dict[str, object],
    rank: int,
    score: float,
    score_kind: ScoreKind,
    index_identity: str,
    generation: str,
    corpus_revision: str,
    key: str | None = None,
) -> Hit:
    """A hit with full custody from a stored chunk row (the fields ``Chunk`` has)."""
    metadata = chunk["metadata"]
    assert isinstance(metadata, dict)
    return Hit(
        key=key or f"chunk:{chunk['chunk_id']}",
        doc_id=str(chunk["doc_id"]),
        chunk_id=str(chunk["chunk_id"]),
        title=str(chunk.get("title", "")),
        text=str(chunk.get("text", "")),
        metadata=metadata,
        custody=Custody(
            source_path=str(chunk["source_path"]),
            line_start=int(str(chunk["line_start"])),
            line_end=int(str(chunk["line_end"])),
            char_start=int(str(chunk["char_start"])),
            char_end=int(str(chunk["char_end"])),
            source_hash=str(chunk["source_hash"]),
            chunk_id=str(chunk["chunk_id"]),
            corpus_revision=corpus_revision,
            index_identity=index_identity,
            index_generation=generation,
            backend=request.backend,
            rsc=contract_ref,
            request=request_fingerprint(request),
            filters_pushed=tuple(f.describe() for f in request.pushed),
            filters_residual=tuple(f.describe() for f in request.residual),
            rank=rank,
            score=score,
            score_kind=score_kind,
        ),
    )


def apply_residual(filters: tuple[Filter, ...], metadata: dict[str, object]) -> bool:
    """Whether a row passes every residual (post-)filter."""
    return all(f.matches(metadata) for f in filters)  # type: ignore[arg-type]
