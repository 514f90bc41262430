"""A backend served under an instance name of its own.

An adapter's contracts name its kind (``backend = "tantivy"``, ``rsc_id = "tantivy.bm25"``), so
two instances of one kind could not stand side by side in one engine. ``NamedInstance`` serves
an adapter as instance ``name``: every contract it serves is the adapter's with ``backend =
name`` and ``rsc_id = "<name>.<rsc_id>"``; a request for such a contract reaches the adapter
as a request for its own, and every hit, gap and statistic that comes back names the
instance (custody ``backend`` and ``rsc``, and the request fingerprint of the renamed request,
so the runtime's screening sees the custody of the request it sent). Nothing else changes:
the scores, the hits' sources and the generations are the adapter's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Self

from backends.base import Adapter, Progress, request_fingerprint
from rsc import BackendStatistics, BackendUnavailable, Calibration, Contract, ScanRequest, ScanResult

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus


def renamed(contract: Contract, name: str) -> Contract:
    """``contract`` as instance ``name`` serves it."""
    return contract.model_copy(update={"backend": name, "rsc_id": f"{name}.{contract.rsc_id}"})


class NamedInstance(Adapter):
    """``inner`` served as backend instance ``name``."""

    def __init__(self, inner: Adapter, name: str) -> None:
        self.backend = name  # type: ignore[misc]
        self.inner = inner
        self.corpus_schema = inner.corpus_schema
        served = tuple(renamed(c, name) for c in inner.index_contracts())
        self.generated_contracts = served
        self._own = {c.rsc_id: inner_c.rsc_id for c, inner_c in zip(served, inner.index_contracts(), strict=True)}

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return tuple(renamed(c, self.backend) for c in self.inner.contracts())

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        raise NotImplementedError("an instance is built as its kind, then named")

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        raise NotImplementedError("an instance is opened as its kind, then named")

    @property
    def identity(self) -> str:
        return self.inner.identity

    def generation(self) -> str:
        return self.inner.generation()

    async def current_generation(self) -> str:
        return await self.inner.current_generation()

    @property
    def reads_generation_inline(self) -> bool:
        return self.inner.reads_generation_inline

    @property
    def pins_inline(self) -> bool:
        return self.inner.pins_inline

    def pinned(self, generation: str) -> Adapter:
        return NamedInstance(self.inner.pinned(generation), self.backend)

    async def pin(self, generation: str) -> Adapter:
        return NamedInstance(await self.inner.pin(generation), self.backend)

    def statistics(self) -> BackendStatistics:
        return self.inner.statistics().model_copy(update={"backend": self.backend})

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        found = self.inner.calibrations()
        if found is None:
            return None
        generation, curves = found
        return generation, tuple(c.model_copy(update={"rsc_id": f"{self.backend}.{c.rsc_id}"}) for c in curves)

    def models(self) -> tuple[dict[str, str | int], ...]:
        return self.inner.models()

    def forget_query_vectors(self) -> None:
        forget = getattr(self.inner, "forget_query_vectors", None)
        if forget is not None:
            forget()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def scan(self, request: ScanRequest) -> ScanResult:
        own = self._own.get(request.rsc_id)
        if own is None:
            raise BackendUnavailable(
                f"instance {self.backend} serves no contract {request.rsc_id}", where=request.rsc_id
            )
        result = await self.inner.scan(request.model_copy(update={"rsc_id": own, "backend": self.inner.backend}))
        shared = {
            "backend": self.backend,
            "rsc": f"{request.rsc_id}@{request.rsc_version}",
            "request": request_fingerprint(request),
        }
        hits = tuple(h.model_copy(update={"custody": h.custody.model_copy(update=shared)}) for h in result.hits)
        gaps = tuple(
            g.model_copy(update={"backend": self.backend}) if g.backend is not None else g for g in result.gaps
        )
        return result.model_copy(update={"hits": hits, "gaps": gaps})
