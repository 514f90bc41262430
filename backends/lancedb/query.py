"""The native LanceDB query of each physical mode and the SQL filter it carries.

``vector_flat`` is an exhaustive scan with the filter applied before the distance top-k;
``vector_ann_prefilter`` probes the IVF index with the filter before the top-k, widening the
probe until k filtered rows are found; ``vector_ann_postfilter`` filters the ANN top-k
afterwards. Filters are written as SQL literals of their column's type (``filter_sql``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from backends.ingest.schema import CorpusSchema, FieldSpec, FieldType, datetime_micros, default_schema
from rsc import BackendUnavailable, Filter, FilterOp, ScanRequest

if TYPE_CHECKING:  # LanceDB is imported by the legs that read the table, not by the exact matrix
    import numpy as np
    import numpy.typing as npt
    from lancedb.query import LanceVectorQueryBuilder
    from lancedb.table import Table

TABLE: Final = "chunks"
VECTOR: Final = "vector"
VECTOR_INDEX: Final = "vector_idx"
MANIFEST: Final = "race.json"

MODE_FLAT: Final = "vector_flat"
MODE_ANN_PREFILTER: Final = "vector_ann_prefilter"
MODE_ANN_POSTFILTER: Final = "vector_ann_postfilter"
MODES: Final = (MODE_FLAT, MODE_ANN_PREFILTER, MODE_ANN_POSTFILTER)
MODE_EXACT: Final = "vector_exact_matrix"
"""The exact matrix's mode (``exact.py``): served from RACE's own files, never a LanceDB query."""
EXACT_DIR: Final = "exact"
"""The folder of the exact matrices beside the table."""

IDENTITY_FIELDS: Final = ("chunk_id", "doc_id")

_CHUNK_FIELDS: Final = (
    "chunk_id",
    "doc_id",
    "title",
    "section",
    "text",
    "source_path",
    "line_start",
    "line_end",
    "char_start",
    "char_end",
    "source_hash",
)
"""The ``Chunk`` fields stored one column each; custody is rebuilt from them."""
_CHUNK_COLUMNS: Final = (*_CHUNK_FIELDS, "corpus_revision", "metadata_json")
QUERY_VECTORS: Final = 256
"""Query vectors kept per index: sorted and random access for one query embed it once."""

ANN_MIN_NPROBES: Final = 20
"""IVF partitions probed at least (LanceDB's default). The prefilter mode may widen past it."""
ANN_PROBE_SHARE: Final = 16
"""At least 1/16 of the partitions are probed, the share the benchmark measured at 100k rows
(20 of 316), so the probed share of a larger table never falls below the measured one."""
RANDOM_ACCESS: Final = "random"
"""``params["access"]`` of a random-access request: the rows its identity filter names,
scored exactly (flat, whatever the contract's mode) under the request's other filters."""


def vector_query(
    table: Table,
    mode: str,
    vector: npt.NDArray[np.float32],
    where: str | None,
    k: int,
    *,
    nprobes: int = ANN_MIN_NPROBES,
    fast_search: bool = False,
    columns: Sequence[str] | None = None,
) -> LanceVectorQueryBuilder:
    """The native LanceDB query for one physical mode; the benchmark measures this same query."""
    import numpy as np
    from lancedb.query import LanceVectorQueryBuilder

    if mode not in MODES:
        raise BackendUnavailable(f"lancedb has no mode {mode!r}", where="lancedb")
    # numpy 2 promotes mixed arithmetic to float64; LanceDB would then compare float64
    # queries against float32 columns, so the query is cast at the edge.
    query = np.ascontiguousarray(vector, dtype=np.float32)
    search = table.search(query, vector_column_name=VECTOR)
    if not isinstance(search, LanceVectorQueryBuilder):
        raise BackendUnavailable(f"lancedb answered a vector query with {type(search).__name__}", where="lancedb")
    builder = search.distance_type("cosine").limit(k)
    if columns is not None:
        # Named explicitly: LanceDB 0.40 warns that it will stop adding `_distance` on its own.
        builder = builder.select([*columns, *(() if "_distance" in columns else ("_distance",))])
    if mode == MODE_FLAT:
        builder = builder.bypass_vector_index()
    elif mode == MODE_ANN_PREFILTER:
        # maximum_nprobes(0): keep probing partitions while fewer than k rows pass the filter.
        builder = builder.minimum_nprobes(nprobes).maximum_nprobes(0)
    else:
        builder = builder.nprobes(nprobes)
    if where is not None:
        builder = builder.where(where, prefilter=mode != MODE_ANN_POSTFILTER)
    if fast_search and mode != MODE_FLAT:
        builder = builder.fast_search()
    return builder


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_literal(kind: FieldType, value: object) -> str | None:
    """A filter operand as an SQL literal of the column's type; ``None`` if no stored value can
    equal it (``Filter.matches`` never equates a string with a number or a boolean)."""
    if kind in (FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE):
        return _sql_string(value) if isinstance(value, str) else None
    if kind is FieldType.BOOLEAN:
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if kind is FieldType.DATETIME:
        return str(datetime_micros(value)) if isinstance(value, str) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is FieldType.INTEGER:
        return str(value) if isinstance(value, int) else repr(float(value))
    return repr(float(value))


def filter_sql(filters: Sequence[Filter], schema: CorpusSchema | None = None) -> str | None:
    """One SQL predicate for all filters (AND), or None when there are none.

    Each operand is written as a literal of its column's type; one that no stored value can
    equal matches nothing (``FALSE``) rather than being cast. A multi-valued keyword matches
    when it holds any of the values (``array_has_any``), ``ne``/``not_in`` when it holds none.
    A null column fails every comparison (``ne`` included), as in ``Filter.matches``; a
    ``prefix`` is ``starts_with`` (no wildcard in the value means anything); an ``any_of``
    group is an ``OR`` of its members.
    """
    fields = (schema or default_schema()).filterable()
    parts = [part for flt in filters for part in _predicates(flt, fields)]
    if not parts:
        return None
    return " AND ".join(f"({p})" for p in parts)


def _predicates(flt: Filter, fields: Mapping[str, FieldSpec]) -> list[str]:
    """The conjuncts of one filter: a range's bounds apart, any other filter one predicate."""
    if flt.op is not FilterOp.RANGE:
        return [_predicate(flt, fields)]
    kind = _kind(flt, fields)
    if kind not in (FieldType.DATE, FieldType.DATETIME, FieldType.INTEGER, FieldType.FLOAT):
        raise BackendUnavailable(f"range filter on keyword field {flt.field!r} is not supported", where="lancedb")
    bounds = [(op, _sql_literal(kind, b)) for op, b in ((">=", flt.gte), ("<=", flt.lte)) if b is not None]
    return [f"`{flt.field}` {op} {lit}" if lit is not None else "FALSE" for op, lit in bounds]


def _kind(flt: Filter, fields: Mapping[str, FieldSpec]) -> FieldType:
    spec = fields.get(flt.field)
    if spec is None and flt.field not in IDENTITY_FIELDS:
        raise BackendUnavailable(f"lancedb cannot filter on field {flt.field!r}", where="lancedb")
    return spec.type if spec is not None else FieldType.KEYWORD


def _predicate(flt: Filter, fields: Mapping[str, FieldSpec]) -> str:
    if flt.op is FilterOp.ANY_OF:
        members = (" AND ".join(f"({p})" for p in _predicates(m, fields)) for m in flt.any_of)
        return " OR ".join(f"({m})" for m in members)
    kind = _kind(flt, fields)
    column = f"`{flt.field}`"
    if flt.op is FilterOp.EXISTS:
        return f"{column} IS NOT NULL"
    if flt.op is FilterOp.PREFIX:
        if kind is not FieldType.KEYWORD or not isinstance(flt.value, str):
            raise BackendUnavailable(
                f"prefix filter on {kind.value} field {flt.field!r} is not supported", where="lancedb"
            )
        return f"starts_with({column}, {_sql_string(flt.value)})"
    single = flt.op in (FilterOp.EQ, FilterOp.NE)
    operands = [flt.value] if single else list(flt.values)
    literals = [lit for lit in (_sql_literal(kind, v) for v in operands) if lit is not None]
    negated = flt.op in (FilterOp.NE, FilterOp.NOT_IN)
    if not literals:
        # No stored value equals an operand: nothing is equal, every present value is unequal.
        return f"{column} IS NOT NULL" if negated else "FALSE"
    if kind is FieldType.KEYWORDS:
        has = f"array_has_any({column}, [{', '.join(literals)}])"
        return f"{column} IS NOT NULL AND NOT {has}" if negated else has
    if len(literals) == 1 and single:
        return f"{column} {'<>' if negated else '='} {literals[0]}"
    return f"{column} {'NOT IN' if negated else 'IN'} ({', '.join(literals)})"


def _split_filters(request: ScanRequest) -> tuple[tuple[Filter, ...], tuple[Filter, ...]]:
    """(filters LanceDB applies, filters applied here to the rows LanceDB returned).

    The postfilter mode hands pushed and residual filters alike to LanceDB's own
    postfilter (``prefilter=False``); the prefilter modes push ``pushed`` before the
    top-k and can only apply ``residual`` filters to the k rows they got back.
    """
    if request.mode == MODE_ANN_POSTFILTER:
        return (*request.pushed, *request.residual), ()
    return request.pushed, request.residual


def _random(request: ScanRequest) -> bool:
    return request.params.get("access") == RANDOM_ACCESS


def _fast(request: ScanRequest) -> bool:
    """Whether the request opted into skipping unindexed rows (off by default)."""
    return request.params.get("fast_search") is True
