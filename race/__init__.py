"""The RACE runtime: the engine and the public names, with a package per stage: the run
(``race.run``), state (``race.state``), evidence tools (``race.evidence``), evaluation
(``race.evaluation``), serving (``race.serving``), indexing and instances (``race.indexing``)
and the command line (``race.cli``); docs/design.md describes each. A plan can be written in
Python with the typed builder (``race.builder``: ``Plan``, ``obligation``, ``union`` …).

The public names load on first use (PEP 562), so that ``race --help`` and other commands
that need no backend do not import LanceDB, pyarrow or networkx."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from race.version import __version__

# Nothing is printed unless the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from race.builder import (
        Plan,
        cascade,
        corroborate,
        fallback,
        freshen,
        intersect,
        join,
        obligation,
        oppose,
        refine,
        union,
    )
    from race.engine import Engine, known_contracts, load_statistics
    from race.indexing.bundled import bundled_index_dir, ensure_bundled_index
    from race.indexing.indexing import build_index, read_manifest
    from race.receipt import (
        RECEIPT_SCHEMA_VERSION,
        CoverageSummary,
        EvidenceItem,
        Fusion,
        Lineage,
        ObligationReceipt,
        Operational,
        OperatorReceipt,
        Receipt,
        receipt_json_schema,
    )
    from race.run.fusion import RRF_K, rrf
    from race.search import Field

_HOMES = {
    "RECEIPT_SCHEMA_VERSION": "race.receipt",
    "RRF_K": "race.run.fusion",
    "CoverageSummary": "race.receipt",
    "Engine": "race.engine",
    "Field": "race.search",
    "EvidenceItem": "race.receipt",
    "Fusion": "race.receipt",
    "Lineage": "race.receipt",
    "ObligationReceipt": "race.receipt",
    "Operational": "race.receipt",
    "OperatorReceipt": "race.receipt",
    "Plan": "race.builder",
    "Receipt": "race.receipt",
    "build_index": "race.indexing.indexing",
    "cascade": "race.builder",
    "corroborate": "race.builder",
    "fallback": "race.builder",
    "freshen": "race.builder",
    "intersect": "race.builder",
    "join": "race.builder",
    "obligation": "race.builder",
    "oppose": "race.builder",
    "refine": "race.builder",
    "union": "race.builder",
    "bundled_index_dir": "race.indexing.bundled",
    "ensure_bundled_index": "race.indexing.bundled",
    "known_contracts": "race.engine",
    "load_statistics": "race.engine",
    "read_manifest": "race.indexing.indexing",
    "receipt_json_schema": "race.receipt",
    "rrf": "race.run.fusion",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'race' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    "RECEIPT_SCHEMA_VERSION",
    "RRF_K",
    "CoverageSummary",
    "Engine",
    "EvidenceItem",
    "Field",
    "Fusion",
    "Lineage",
    "ObligationReceipt",
    "Operational",
    "OperatorReceipt",
    "Plan",
    "Receipt",
    "__version__",
    "build_index",
    "bundled_index_dir",
    "cascade",
    "corroborate",
    "ensure_bundled_index",
    "fallback",
    "freshen",
    "intersect",
    "join",
    "known_contracts",
    "load_statistics",
    "obligation",
    "oppose",
    "read_manifest",
    "receipt_json_schema",
    "refine",
    "rrf",
    "union",
]
