"""How to open an engine: ``EngineOptions``, what ``race batch`` runs its plans on, picklable so
that a Ray actor opens its own engine from the same options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from race.engine import Engine, load_statistics
from race.indexing.catalog import load_catalog
from race.indexing.indexing import read_manifest


@dataclass(frozen=True)
class EngineOptions:
    """How to open the engine a batch runs on; picklable, so a Ray actor opens its own."""

    index: Path | None
    statistics: Path | None = None
    remotes: tuple[str, ...] = ()
    remote_timeout: float = 5.0
    early_stop: bool = True
    catalog: Path | None = None
    """A ``race.catalog/1`` file naming every instance, in place of ``index`` and ``remotes``."""
    compiled_queries: bool = True
    """A batch embeds many queries: its set-up compiles the query path (``Engine.open``)."""

    def check(self) -> None:
        """Bad input of the engine itself (no index, an unreadable catalog), before a batch writes."""
        if self.catalog is not None:
            load_catalog(self.catalog)
            return
        assert self.index is not None
        read_manifest(self.index)

    def open(self) -> Engine:
        stats = load_statistics(self.statistics) if self.statistics is not None else None
        if self.catalog is not None:
            engine = Engine.from_catalog(self.catalog, statistics=stats, early_stop=self.early_stop)
            engine.compiled_queries = self.compiled_queries
            return engine
        assert self.index is not None
        return Engine.open(
            self.index,
            statistics=stats,
            remotes=self.remotes,
            remote_timeout=self.remote_timeout,
            early_stop=self.early_stop,
            compiled_queries=self.compiled_queries,
        )
