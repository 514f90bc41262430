"""A receipt as a table: one row per hit, for plain records, Arrow and pandas.

An evidence item found by two backends is two rows with the same ``rank`` and ``key``: each row
keeps its own hit's custody (source, lines, hash, backend, contract, native score and its rank
in that backend's answer) beside the item's (rank, status, fused score). The gaps and coverage
are not rows: they travel beside the table (Arrow schema metadata, ``DataFrame.attrs``), so a
table of hits is never read without what was not searched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from rsc import Gap, canonical_data, canonical_json, dumps_canonical

if TYPE_CHECKING:
    import pandas
    import pyarrow


class Receipt(Protocol):
    """What the rows read of a receipt (``race.receipt.Receipt``, which calls them)."""

    @property
    def evidence(self) -> Sequence[Any]: ...
    @property
    def gaps(self) -> Sequence[Gap]: ...
    @property
    def coverage(self) -> BaseModel: ...
    @property
    def obligations(self) -> Sequence[Any]: ...
    @property
    def fingerprints(self) -> Any: ...


COLUMNS: tuple[tuple[str, str], ...] = (
    ("rank", "int64"),
    ("key", "string"),
    ("status", "string"),
    ("obligations", "list<string>"),
    ("fused_score", "float64"),
    ("fusion", "string"),
    ("doc_id", "string"),
    ("chunk_id", "string"),
    ("title", "string"),
    ("text", "string"),
    ("source_path", "string"),
    ("line_start", "int64"),
    ("line_end", "int64"),
    ("source_hash", "string"),
    ("backend", "string"),
    ("rsc", "string"),
    ("hit_rank", "int64"),
    ("score", "float64"),
    ("score_kind", "string"),
    ("index_generation", "string"),
    ("filters_pushed", "list<string>"),
    ("filters_residual", "list<string>"),
    ("metadata", "string"),
)
"""Every row's columns and their Arrow types; ``metadata`` is the document's metadata as
canonical JSON (its fields differ from corpus to corpus)."""


def records(receipt: Receipt) -> list[dict[str, Any]]:
    """One dict per hit, in the receipt's order (item rank, then the item's hits)."""
    rows: list[dict[str, Any]] = []
    for item in receipt.evidence:
        for hit in item.hits:
            custody = hit.custody
            rows.append(
                {
                    "rank": item.rank,
                    "key": item.key,
                    "status": item.status.value,
                    "obligations": list(item.obligations),
                    "fused_score": item.fusion.score,
                    "fusion": item.fusion.method,
                    "doc_id": hit.doc_id,
                    "chunk_id": hit.chunk_id,
                    "title": hit.title,
                    "text": hit.text,
                    "source_path": custody.source_path,
                    "line_start": custody.line_start,
                    "line_end": custody.line_end,
                    "source_hash": custody.source_hash,
                    "backend": custody.backend,
                    "rsc": custody.rsc,
                    "hit_rank": custody.rank,
                    "score": custody.score,
                    "score_kind": custody.score_kind.value,
                    "index_generation": custody.index_generation,
                    "filters_pushed": list(custody.filters_pushed),
                    "filters_residual": list(custody.filters_residual),
                    "metadata": canonical_json(hit.metadata).decode(),
                }
            )
    return rows


def beside(receipt: Receipt) -> dict[str, Any]:
    """What travels with the rows: the gaps, the coverage, each obligation's status and the
    evidence fingerprint."""
    return {
        "gaps": [canonical_data(g) for g in receipt.gaps],
        "coverage": canonical_data(receipt.coverage),
        "obligations": {ob.id: ob.status.value for ob in receipt.obligations},
        "evidence_fingerprint": receipt.fingerprints.evidence,
    }


def arrow(receipt: Receipt) -> pyarrow.Table:
    """The rows as an Arrow table; the schema's metadata holds ``race.gaps``, ``race.coverage``,
    ``race.obligations`` and ``race.evidence_fingerprint`` as JSON."""
    import pyarrow as pa

    types = {"int64": pa.int64(), "string": pa.string(), "float64": pa.float64(), "list<string>": pa.list_(pa.string())}
    rows = records(receipt)
    extra = {f"race.{name}": dumps_canonical(value) for name, value in beside(receipt).items()}
    schema = pa.schema([pa.field(name, types[kind]) for name, kind in COLUMNS], metadata=extra)
    return pa.Table.from_pylist(rows, schema=schema)


def pandas_frame(receipt: Receipt) -> pandas.DataFrame:
    """The rows as a pandas DataFrame (``pip install 'race-engine[pandas]'``); ``frame.attrs``
    holds ``gaps``, ``coverage``, ``obligations`` and ``evidence_fingerprint``."""
    from race.extras import require

    pd = require("pandas", feature="Receipt.to_pandas()", where="to_pandas")
    frame = pd.DataFrame.from_records(records(receipt), columns=[name for name, _ in COLUMNS])
    frame.attrs.update(beside(receipt))
    return frame
