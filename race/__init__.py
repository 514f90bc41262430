"""The RACE runtime: executor, normalization, fusion, receipts, caches, replay, API and CLI."""

from race.bundled import bundled_index_dir, ensure_bundled_index
from race.engine import Engine, known_contracts, load_statistics
from race.fusion import RRF_K, rrf
from race.indexing import build_index, read_manifest
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

__all__ = [
    "RECEIPT_SCHEMA_VERSION",
    "RRF_K",
    "CoverageSummary",
    "Engine",
    "EvidenceItem",
    "Fusion",
    "Lineage",
    "ObligationReceipt",
    "Operational",
    "OperatorReceipt",
    "Receipt",
    "build_index",
    "bundled_index_dir",
    "ensure_bundled_index",
    "known_contracts",
    "load_statistics",
    "read_manifest",
    "receipt_json_schema",
    "rrf",
]
