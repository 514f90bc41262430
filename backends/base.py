"""The one small base every backend adapter implements, and the index-directory layout.

An adapter owns its backend's index inside ``<index dir>/<backend>/``: it builds it from a
``Corpus``, reopens it, reports its current generation, and answers ``ScanRequest``s with
``ScanResult``s whose hits carry full custody. What the backend can honestly do is not in
code but in the RSC files under ``<adapter package>/rsc/*.json``.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from pydantic import TypeAdapter, ValidationError

from backends.hits import rest_of_hits
from backends.ingest.schema import CorpusSchema
from backends.threads import blocking as blocking
from rsc import (
    BackendStatistics,
    Calibration,
    Contract,
    Filter,
    Gap,
    GapKind,
    GapSeverity,
    Hit,
    ScanRequest,
    ScanResult,
    ScoreKind,
    SnapshotMoved,
    fingerprint,
    load_contract,
)

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while an index is built."""

UNKNOWN_GENERATION: Final = "unknown"
"""The generation of a backend whose snapshot could not be read: never a cache hit, never pinned."""

_log = logging.getLogger(__name__)


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
        """The RSCs shipped with this adapter: the templates of every index's contracts."""

    generated_contracts: tuple[Contract, ...] | None = None
    """The contracts written for the index this adapter opened (``backends.generated``)."""

    corpus_schema: CorpusSchema | None = None
    """The corpus schema of the index this adapter opened (plan filter values must fit it)."""

    def index_contracts(self) -> tuple[Contract, ...]:
        """The RSCs this adapter serves: those generated for its index, else the shipped ones."""
        return self.generated_contracts if self.generated_contracts is not None else self.contracts()

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

    async def current_generation(self) -> str:
        """``generation()`` for the runtime. Local adapters read a small metadata file, cheaper
        than a thread hop; an adapter whose generation needs network I/O overrides this."""
        return self.generation()

    @property
    def reads_generation_inline(self) -> bool:
        """Whether ``generation()`` is a read of local files this adapter already holds open (a
        ``stat``, a small metadata file) that never waits on anything else. The engine then reads
        it inline, without a task and a bound of its own; every other generation (a network
        round trip, anything that may block) is read as its own bounded task, so that it never
        holds another backend's read nor the run. The default, ``False``, is the safe answer."""
        return False

    @property
    def pins_inline(self) -> bool:
        """Whether ``pinned()`` is, like such a generation read, a ``stat`` or two of local files
        this adapter holds open and a searcher it already has. The engine then pins it inline,
        without a task and a bound of its own. The default, ``False``, is the safe answer."""
        return False

    def pinned(self, generation: str) -> Adapter:
        """This backend held at ``generation`` for one run: every scan of the returned adapter
        reads that snapshot and its hits carry that generation, whatever commits land meanwhile.
        A snapshot that cannot be pinned (gone, moved, unknown) gives an adapter whose scans
        raise ``SnapshotMoved``. The default, for adapters with nothing to pin, is ``self``."""
        return self

    async def pin(self, generation: str) -> Adapter:
        """``pinned()`` for the runtime. Pinning a local index is a ``stat`` or two, cheaper than a
        thread hop; an adapter whose pinning does real I/O overrides this to run it on a thread."""
        return self.pinned(generation)

    @abstractmethod
    async def scan(self, request: ScanRequest) -> ScanResult:
        """Answer one translated request. Blocking work goes through a worker thread."""

    def scan_call(self, request: ScanRequest) -> Callable[[], ScanResult] | None:
        """``scan(request)`` as the one blocking call it is, where ``scan`` does nothing but run
        that call through ``blocking``: a leg then runs it on a worker thread itself, with no task
        of its own (``race.run.detached.CallPool.call_blocking``). ``None`` (the default): the leg
        awaits ``scan``. An adapter that overrides ``scan`` overrides this too."""
        return None

    def statistics(self) -> BackendStatistics:
        return BackendStatistics(backend=self.backend, rows=0)

    def gap(
        self, request: ScanRequest, kind: GapKind, detail: str, severity: GapSeverity = GapSeverity.SHORTFALL
    ) -> Gap:
        """A gap this backend observed while answering ``request``: a degraded read, logged by
        ``backends.base`` (a shortfall at WARNING, a caveat at DEBUG)."""
        level = logging.WARNING if severity is GapSeverity.SHORTFALL else logging.DEBUG
        if _log.isEnabledFor(level):
            _log.log(
                level,
                "%s %s %s: degraded read, %s: %s",
                self.backend,
                request.rsc_id,
                request.obligation,
                kind.value,
                detail,
            )
        return Gap(kind=kind, obligation=request.obligation, backend=self.backend, detail=detail, severity=severity)

    def warm(self, modes: frozenset[str] | None = None) -> None:
        """Do this backend's set-up for scans in ``modes`` (every mode if ``None``): library
        imports, opens of tables and indexes, model weights, matrices. Blocking; the engine
        calls it on a worker thread before a plan's clock starts, so that set-up is never
        charged to a deadline. Idempotent; a failure here is left for the leg to report."""
        return None

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        """Recall measured on this backend's index for its approximate contracts, with the
        generation it was measured at; ``None`` where there is none."""
        return None

    def models(self) -> tuple[dict[str, str | int], ...]:
        """The identity (name, dims, weights sha256) of each model this backend runs; every
        receipt names them."""
        return ()

    async def aclose(self) -> None:
        return None


class RefusedSnapshot(Adapter):
    """Stands for a backend whose planned snapshot could not be pinned: every scan raises
    ``SnapshotMoved`` naming the planned and the current generation, so the leg is refused
    rather than answered from another snapshot."""

    def __init__(self, inner: Adapter, *, planned: str, current: str, reason: str) -> None:
        self.backend = inner.backend  # type: ignore[misc]
        self.inner = inner
        self.planned = planned
        self.current = current
        self.reason = reason

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return self.inner.contracts()

    def index_contracts(self) -> tuple[Contract, ...]:
        return self.inner.index_contracts()

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        raise NotImplementedError("a refused snapshot is never built")

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        raise NotImplementedError("a refused snapshot is never opened")

    @property
    def identity(self) -> str:
        return self.inner.identity

    def generation(self) -> str:
        return self.current

    def pinned(self, generation: str) -> Adapter:
        return self.inner.pinned(generation)

    async def pin(self, generation: str) -> Adapter:
        return await self.inner.pin(generation)

    def statistics(self) -> BackendStatistics:
        return self.inner.statistics()

    def models(self) -> tuple[dict[str, str | int], ...]:
        return self.inner.models()

    async def scan(self, request: ScanRequest) -> ScanResult:
        raise SnapshotMoved(
            f"the planned snapshot {self.planned} {self.reason}; the backend is at {self.current}",
            where=request.rsc_id,
            planned=self.planned,
            current=self.current,
        )


def request_fingerprint(request: ScanRequest) -> str:
    """The request's fingerprint, remembered for the request object: a cached plan hands every
    run the same requests, and a leg names its request several times (its cache key, custody,
    screening). The last requests are held with their fingerprints and found by identity (``is``),
    never by their addresses.

    A request is frozen but for ``params``, a dict of scalars that can be changed in place; so
    each entry keeps the params it was computed with as JSON (which tells ``1`` from ``True``, as
    the fingerprint does, where ``==`` does not), and an entry whose request's params no longer
    serialize to it is computed again. Params JSON cannot hold are never remembered."""
    try:
        params = json.dumps(request.params, sort_keys=True, separators=(",", ":"), allow_nan=True)
    except (TypeError, ValueError):
        return fingerprint(request)
    for known, known_params, value in tuple(_REQUEST_FINGERPRINTS):
        if known is request and known_params == params:
            return value
    value = fingerprint(request)
    _REQUEST_FINGERPRINTS.append((request, params, value))
    return value


_REQUEST_FINGERPRINTS: deque[tuple[ScanRequest, str, str]] = deque(maxlen=32)


_HITS = TypeAdapter(list[Hit])


def custody_hits(
    *,
    request: ScanRequest,
    contract_ref: str,
    rows: Sequence[tuple[dict[str, Any], float]],
    score_kind: ScoreKind,
    index_identity: str,
    generation: str,
    corpus_revision: str,
    keys: Sequence[str] | None = None,
) -> list[Hit]:
    """Hits with full custody from stored chunk rows (the fields ``Chunk`` has), in rank order.

    What every hit of one scan shares (the request fingerprint, the filters as applied) is
    computed once. The first hit is validated and the others built beside it from their plain
    rows (``backends.hits``); a row that is not plain has the whole list validated in one call.
    """
    shared = {
        "corpus_revision": corpus_revision,
        "index_identity": index_identity,
        "index_generation": generation,
        "backend": request.backend,
        "rsc": contract_ref,
        "request": request_fingerprint(request),
        "filters_pushed": tuple(f.describe() for f in request.pushed),
        "filters_residual": tuple(f.describe() for f in request.residual),
        "score_kind": score_kind,
        "access": "random" if request.params.get("access") == "random" else "sorted",
    }

    def raw(rank: int, chunk: dict[str, Any], score: float) -> dict[str, Any]:
        return {
            "key": keys[rank - 1] if keys is not None else f"chunk:{chunk['chunk_id']}",
            "doc_id": chunk["doc_id"],
            "chunk_id": chunk["chunk_id"],
            "title": chunk.get("title", ""),
            "text": chunk.get("text", ""),
            "metadata": chunk["metadata"],
            "custody": {
                **shared,
                "source_path": chunk["source_path"],
                "line_start": chunk["line_start"],
                "line_end": chunk["line_end"],
                "char_start": chunk.get("char_start"),
                "char_end": chunk.get("char_end"),
                "source_hash": chunk["source_hash"],
                "chunk_id": chunk["chunk_id"],
                # A row that records the corpus revision it was indexed from says so itself.
                "corpus_revision": chunk.get("corpus_revision", corpus_revision),
                "rank": rank,
                "score": score,
            },
        }

    if not rows:
        return []
    try:
        first = _HITS.validate_python([raw(1, *rows[0])])
        rest = rest_of_hits(first[0], rows, keys, corpus_revision)
    except ValidationError:
        rest = None
    if rest is None:  # the answer validated whole, and refused as a whole if it must be
        return _HITS.validate_python([raw(rank, chunk, score) for rank, (chunk, score) in enumerate(rows, start=1)])
    return first + rest


def custody_hit(
    *,
    request: ScanRequest,
    contract_ref: str,
    chunk: dict[str, Any],
    rank: int,
    score: float,
    score_kind: ScoreKind,
    index_identity: str,
    generation: str,
    corpus_revision: str,
    key: str | None = None,
) -> Hit:
    """One hit with full custody; ``custody_hits`` is the batch form."""
    hit = custody_hits(
        request=request,
        contract_ref=contract_ref,
        rows=[(chunk, score)],
        score_kind=score_kind,
        index_identity=index_identity,
        generation=generation,
        corpus_revision=corpus_revision,
        keys=[key] if key is not None else None,
    )[0]
    return hit.model_copy(update={"custody": hit.custody.model_copy(update={"rank": rank})})


def apply_residual(filters: tuple[Filter, ...], metadata: dict[str, object]) -> bool:
    """Whether a row passes every residual (post-)filter."""
    return all(f.matches(metadata) for f in filters)  # type: ignore[arg-type]
