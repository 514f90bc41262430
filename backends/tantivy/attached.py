"""A tantivy index RACE did not build, attached through a field mapping.

The index keeps its own schema (``doc_key``, ``body``, ``team``, ...). Its one contract, BM25
over the mapped text (and title) fields, is generated from the schema tantivy itself records
in ``meta.json``, field by field:

* a stored field indexed as raw terms (a ``raw`` text field, an indexed number or boolean) is
  filtered inside the search (``native_prefilter_exact``), as the built index's fields are;
* a stored field that is not indexed that way (a tokenized text field, a number stored but not
  indexed) can only be checked on the rows the search returned (``postfilter_only``): a
  filtered answer may then be short, and the scan says so with a ``postfilter_only_filter`` gap;
* a field that is not stored cannot be reported, so it is no metadata and no filter field.

Query text is analysed by the analyzer of the field's own tokenizer (``default``, ``en_stem``,
``raw``, ``whitespace``); a field with any other tokenizer is refused at attach, since its
terms could not be reproduced. The text is never parsed as query syntax (I14).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import tantivy

from backends.base import UNKNOWN_GENERATION, Adapter, RefusedSnapshot, blocking
from backends.ingest.schema import FieldType
from backends.mapping import (
    AttachedAdapter,
    FieldMapping,
    absent_reasons,
    identity_operand,
    mapped_hits,
    metadata_columns,
)
from rsc import (
    BackendStatistics,
    BackendUnavailable,
    Contract,
    Filter,
    FilterOp,
    FilterSupportClass,
    Gap,
    GapKind,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    ScoreKind,
    fingerprint,
)

MODE = "bm25"
_IDENTITY = ("chunk_id", "doc_id")
_NUMBERS = {"i64": FieldType.INTEGER, "u64": FieldType.INTEGER, "f64": FieldType.FLOAT, "bool": FieldType.BOOLEAN}
_RANGE_TYPES = {"i64": tantivy.FieldType.Integer, "u64": tantivy.FieldType.Unsigned, "f64": tantivy.FieldType.Float}


def analyzer(tokenizer: str) -> tantivy.TextAnalyzer | None:
    """The analyzer tantivy registers under ``tokenizer``, or ``None`` for one not known here."""
    if tokenizer == "raw":
        return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.raw()).build()
    if tokenizer == "whitespace":
        return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
    if tokenizer not in ("default", "en_stem"):
        return None
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
    )
    if tokenizer == "en_stem":
        builder = builder.filter(tantivy.Filter.stemmer("english"))
    return builder.build()


class _Field:
    """One field of the index as its recorded schema describes it."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.name = str(entry["name"])
        self.type = str(entry["type"])
        options = entry.get("options") or {}
        indexing = options.get("indexing")
        self.stored = bool(options.get("stored"))
        self.tokenizer = str(indexing["tokenizer"]) if self.type == "text" and indexing else None
        self.indexed = self.tokenizer is not None if self.type == "text" else bool(options.get("indexed"))

    @property
    def metadata_type(self) -> FieldType | None:
        if self.type == "text":
            return FieldType.KEYWORD
        return _NUMBERS.get(self.type)

    @property
    def as_terms(self) -> bool:
        """Whether a value is one term of the index, so a term query finds exactly it."""
        return self.indexed and (self.type != "text" or self.tokenizer == "raw")


class AttachedTantivyAdapter(AttachedAdapter):
    """One tantivy index under an instance name, served through its field mapping."""

    source = "index"

    def __init__(self, *, name: str, path: Path, mapping: FieldMapping, key_domain: str | None = None) -> None:
        self.backend = name  # type: ignore[misc]
        where = f"instance {name}"
        self._path, self._mapping, self._key_domain = path, mapping, key_domain or name
        self._meta_path = path / "meta.json"
        try:
            meta = json.loads(self._meta_path.read_text(encoding="utf-8"))
            self._index = tantivy.Index.open(str(path))
        except (OSError, ValueError) as exc:
            raise IndexMissingError(f"no tantivy index at {path}: {exc}", where=where) from exc
        fields = {f.name: f for f in (_Field(e) for e in meta.get("schema", []))}
        for field, column in mapping.columns().items():
            if column not in fields:
                raise IndexMissingError(f"field mapping {field!r}: the index has no field {column!r}", where=where)
            if not fields[column].stored:
                raise IndexMissingError(f"field mapping {field!r}: field {column!r} is not stored", where=where)
        self._searched: dict[str, tantivy.TextAnalyzer] = {}
        for searched in (mapping.text, mapping.title):
            column = searched or ""
            spec = fields.get(column)
            if spec is None or spec.type != "text" or spec.tokenizer is None:
                if column == mapping.text:
                    raise IndexMissingError(f"field mapping 'text': field {column!r} is not indexed text", where=where)
                continue
            found = analyzer(spec.tokenizer)
            if found is None:
                raise IndexMissingError(
                    f"field {column!r}: tokenizer {spec.tokenizer!r} is not one RACE can reproduce", where=where
                )
            self._searched[spec.name] = found
        candidates = sorted(n for n, f in fields.items() if f.stored and f.metadata_type is not None)
        chosen = metadata_columns(mapping, candidates)
        for column in chosen:
            if column not in candidates:
                raise IndexMissingError(
                    f"metadata field {column!r} is missing, not stored or not a scalar", where=where
                )
        self._fields = {c: fields[c] for c in chosen}
        self._id = fields[mapping.id]
        self._absent = absent_reasons(mapping, name)
        self._index.config_reader(reload_policy="Manual")
        self._schema = self._index.schema
        self._pin: tuple[tantivy.Searcher, str] | None = None
        self._stats = BackendStatistics(backend=name, rows=0)
        self.generated_contracts = (self._contract(),)

    # -- contract ------------------------------------------------------------------------------

    def support(self, column: str) -> FilterSupportClass:
        return (
            FilterSupportClass.NATIVE_PREFILTER_EXACT
            if self._fields[column].as_terms
            else FilterSupportClass.POSTFILTER_ONLY
        )

    def _contract(self) -> Contract:
        from backends.tantivy import TantivyAdapter

        template = next(c for c in TantivyAdapter.contracts() if c.mode == MODE)
        filters: dict[str, Any] = {}
        if self._id.as_terms:
            for field in _IDENTITY:
                if field == "chunk_id" or self._mapping.doc_id is None:
                    filters[field] = {"support": "native_prefilter_exact", "ops": ["eq", "in"]}
        for column, spec in self._fields.items():
            ranged = spec.metadata_type in (FieldType.INTEGER, FieldType.FLOAT)
            filters[column] = {
                "support": self.support(column).value,
                "ops": ["eq", "in", "range"] if ranged else ["eq", "in"],
            }
        postfilter = [c for c in self._fields if self.support(c) is FilterSupportClass.POSTFILTER_ONLY]
        data = template.model_dump(mode="json")
        data.update(
            rsc_id=f"{self.backend}.tantivy.bm25",
            version="1.0.0",
            backend=self.backend,
            description=(
                f"BM25 over {sorted(self._searched)} of the tantivy index at {self._path}, attached (not built by "
                "RACE); query text is analysed by each field's own tokenizer, never parsed. Filters on raw-term "
                f"fields are pushed into the search; {postfilter or 'no field'} can only be checked on the rows "
                "the search returned."
            ),
            filters=dict(sorted(filters.items())),
            provenance_fields=[
                f for f in template.provenance_fields if f not in self._absent and f != "char_start" and f != "char_end"
            ],
            source_domain=f"tantivy index at {self._path}, attached (not built by RACE)",
            snapshot={
                "semantics": "generation",
                "generation_fields": ["opstamp", "segments", "deletes"],
                "freshness": "as of the index's last commit when the run started",
            },
        )
        return Contract.model_validate(data)

    # -- snapshots -----------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return f"tantivy:{self._path}"

    def _generation_of(self, meta: dict[str, Any]) -> str:
        segments = sorted(
            (str(s["segment_id"]), int(s.get("max_doc", 0)), int((s.get("deletes") or {}).get("num_deleted_docs", 0)))
            for s in meta.get("segments", [])
        )
        facts = {"index": self.identity, "opstamp": meta.get("opstamp"), "segments": segments}
        return f"{self.backend}:" + fingerprint(facts)

    def generation(self) -> str:
        pin = self._pin
        if pin is not None:
            return pin[1]
        return self._generation_of(json.loads(self._meta_path.read_text(encoding="utf-8")))

    def _hold(self) -> tuple[tantivy.Searcher, str]:
        pin = self._pin
        if pin is not None:
            return pin
        self._index.reload()
        searcher = self._index.searcher()
        # meta.json read after the reload names the state the searcher holds, unless a commit
        # landed in between: then the generations differ and the pin is refused.
        return searcher, self.generation()

    def pinned(self, generation: str) -> Adapter:
        try:
            held = self._hold()
        except (OSError, ValueError) as exc:
            reason = f"cannot be read ({type(exc).__name__}: {exc})"
            return RefusedSnapshot(self, planned=generation, current=UNKNOWN_GENERATION, reason=reason)
        if held[1] != generation:
            return RefusedSnapshot(self, planned=generation, current=held[1], reason="is no longer the index's state")
        pinned = copy.copy(self)
        pinned._pin = held
        return pinned

    def statistics(self) -> BackendStatistics:
        """The row count the cost model reads; an index that cannot be read now keeps the last
        count (statistics only choose among plans, and the leg itself reports the failure)."""
        with contextlib.suppress(OSError, ValueError):
            self._stats = BackendStatistics(backend=self.backend, rows=int(self._hold()[0].num_docs))
        return self._stats

    # -- scans ---------------------------------------------------------------------------------

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def scan_call(self, request: ScanRequest) -> Callable[[], ScanResult]:
        return partial(self._scan, request)

    def _scan(self, request: ScanRequest) -> ScanResult:
        if request.mode != MODE:
            raise BackendUnavailable(f"{self.backend} has no mode {request.mode!r}", where=request.rsc_id)
        searcher, generation = self._hold()
        clauses = [
            (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, field, term))
            for field, found in sorted(self._searched.items())
            for term in sorted(set(found.analyze(request.query.text or "")))
        ]
        query = tantivy.Query.boolean_query(clauses) if clauses else tantivy.Query.empty_query()
        if request.pushed:
            pushed = tantivy.Query.boolean_query([(tantivy.Occur.Must, self._filter(f)) for f in request.pushed])
            query = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, query), (tantivy.Occur.Must, tantivy.Query.const_score_query(pushed, 0.0))]
            )
        try:
            found = searcher.search(query, limit=2 * request.k + 8, count=True)
        except ValueError as exc:
            raise BackendUnavailable(f"tantivy search failed: {exc}", where=request.rsc_id) from exc
        rows = []
        for score, address in found.hits:
            doc = searcher.doc(address).to_dict()
            row = {column: (values[0] if len(values) == 1 else None) for column, values in doc.items() if values}
            rows.append((float(score), row, self._metadata(doc)))
        rows.sort(key=lambda r: (-r[0], str(r[1].get(self._mapping.id))))
        candidates = rows[: request.k]
        kept = [r for r in rows if all(f.matches(r[2]) for f in request.residual)][: request.k]
        hits = mapped_hits(
            request=request,
            mapping=self._mapping,
            rows=[(row, score) for score, row, _ in kept],
            metadata=[meta for _, _, meta in kept],
            absent=self._absent,
            key_domain=self._key_domain,
            score_kind=ScoreKind.BM25,
            index_identity=self.identity,
            generation=generation,
            corpus_revision=generation,
        )
        count = getattr(found, "count", None)
        total = int(count) if count is not None else len(hits)
        gaps: list[Gap] = []
        if request.residual and len(hits) < min(request.k, len(candidates)):
            detail = (
                f"filter applied after the search, to its {len(rows)} best rows: {len(hits)} of k={request.k} survived "
                f"({'; '.join(f.describe() for f in request.residual)})"
            )
            gaps.append(self.gap(request, GapKind.POSTFILTER_ONLY_FILTER, detail))
        return ScanResult(
            hits=tuple(hits),
            gaps=tuple(gaps),
            generation=generation,
            total_matches=None if request.residual else total,
            exhausted=not request.residual and total <= len(hits),
        )

    def _metadata(self, doc: dict[str, list[Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for column in self._fields:
            values = doc.get(column) or []
            if len(values) == 1:
                out[column] = values[0]
            elif values:
                out[column] = tuple(sorted(str(v) for v in values))
        return out

    def _filter(self, flt: Filter) -> tantivy.Query:
        if flt.field in _IDENTITY:
            spec = self._id
        else:
            found = self._fields.get(flt.field)
            if found is None or not found.as_terms:
                raise BackendUnavailable(f"{self.backend} cannot push a filter on {flt.field!r}", where=self.backend)
            spec = found
        if flt.op is FilterOp.RANGE:
            kind = _RANGE_TYPES.get(spec.type)
            if kind is None:
                raise BackendUnavailable(f"range filter on field {flt.field!r} is not supported", where=self.backend)
            low, high = flt.gte, flt.lte
            if spec.type != "f64":
                # An integer field holds a value >= 2.5 exactly when it holds one >= 3.
                low = math.ceil(low) if isinstance(low, float) else low
                high = math.floor(high) if isinstance(high, float) else high
            return tantivy.Query.range_query(self._schema, spec.name, kind, low, high, use_inverted_index=True)
        values: list[object] = [flt.value] if flt.op is FilterOp.EQ else list(flt.values)
        if flt.field in _IDENTITY:
            values = [identity_operand(v, numeric=spec.type in ("i64", "u64")) for v in values]
        clauses = [
            (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, spec.name, v))
            for v in values
            if _fits(spec, v)
        ]
        return tantivy.Query.boolean_query(clauses) if clauses else tantivy.Query.empty_query()


def _fits(spec: _Field, value: object) -> bool:
    """Whether a filter operand can equal a value of this field (a string never equals a number)."""
    if spec.type == "text":
        return isinstance(value, str)
    if spec.type == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return spec.type == "f64" or float(value).is_integer()
