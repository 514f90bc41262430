"""The tantivy adapter: BM25 search and exact identifier lookups over chunk documents.

Filters are pushed into tantivy as a constant-score clause of weight 0, so a filtered
search ranks exactly like the unfiltered one restricted to the filtered set. Query text is
analysed into terms by the same analyzer the index uses; it never passes through tantivy's
query parser, so ``doc_type:adr`` typed in a query is three words, not a filter (I14).
The index layout (schema, analyzer, values as terms) is ``backends.tantivy.fields``.

Snapshots. The generation names one committed state: the index's own id (recorded at build),
the opstamp and the segment ids with their delete counts. The reader reloads only when this
adapter asks (``Manual`` policy), so the searcher it hands out is always the state its
generation names; a run holds one searcher for all its scans (``pinned``), and a commit that
lands meanwhile is not seen until the next run.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import orjson
import tantivy

from backends.base import (
    UNKNOWN_GENERATION,
    Adapter,
    Progress,
    RefusedSnapshot,
    blocking,
    custody_hits,
    load_contracts_beside,
)
from backends.generated import generate_contracts, read_contracts, schema_of, write_contracts
from backends.ingest.schema import CorpusSchema
from backends.tantivy.fields import ANALYZER, TEXT_FIELDS, _analyzer
from backends.tantivy.fields import KEYWORD_FIELDS as KEYWORD_FIELDS
from backends.tantivy.fields import date_number as date_number
from backends.tantivy.filters import filter_query
from rsc import (
    BackendStatistics,
    BackendUnavailable,
    Contract,
    Filter,
    Gap,
    GapKind,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    ScoreKind,
    fingerprint,
)
from rsc.canonical import read_json

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus

_log = logging.getLogger(__name__)

_EXACT_SET_CAP = 10_000
_QUERIES_KEPT = 256
"""BM25 queries remembered by text, as many as the plan cache keeps plans."""


def _generation_of(meta: dict[str, Any], manifest: dict[str, Any]) -> str:
    segments = sorted(
        (str(s["segment_id"]), int(s.get("max_doc", 0)), int((s.get("deletes") or {}).get("num_deleted_docs", 0)))
        for s in meta.get("segments", [])
    )
    # An index built before ids were recorded is named by the corpus it was built from.
    index_id = str(manifest.get("index_id") or manifest.get("corpus_revision", ""))
    return "tantivy:" + fingerprint({"index": index_id, "opstamp": meta.get("opstamp"), "segments": segments})


_STAMP_TRIES = 5
"""Reads of meta.json retried while commits keep replacing it under the read."""


@dataclass(frozen=True)
class _State:
    """One committed state as the reader has it loaded, with what ``race.json`` said then."""

    stamp: tuple[int, int, int]
    """(inode, mtime, size) of meta.json, the same before and after the reader loaded it."""
    generation: str
    corpus_revision: str
    rows: int
    value_counts: dict[str, dict[str, int]]


@dataclass(frozen=True)
class _Pin:
    """One run's hold on a state: its searcher keeps those segments readable to the end."""

    state: _State
    searcher: tantivy.Searcher


class TantivyAdapter(Adapter):
    backend = "tantivy"

    def __init__(self, path: Path, index: tantivy.Index, corpus_schema: CorpusSchema | None = None) -> None:
        self._path = path
        self._index = index
        self._fields = (corpus_schema or schema_of({})).filterable()
        # The pool changes only when this adapter reloads it, under the lock, so the memo's
        # generation is always the state the pool holds.
        index.config_reader(reload_policy="Manual")
        self._schema = index.schema
        self._analyzer = _analyzer()
        self._manifest_path = path / "race.json"
        self._meta_path = str(path / "meta.json")
        self._state: _State | None = None
        self._generation_lock = threading.Lock()
        self._pin: _Pin | None = None
        # Shared with every pinned copy of this adapter (``pinned`` copies it shallowly).
        self._queries: OrderedDict[str, tantivy.Query] = OrderedDict()
        self._queries_lock = threading.Lock()

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return load_contracts_beside(__file__)

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        path = index_dir / cls.backend
        from backends.tantivy.build import write_index  # the ingest code, needed only to build

        write_index(corpus, path, progress)
        write_contracts(path, generate_contracts(cls.contracts(), corpus.corpus_schema))
        return cls.open(index_dir).generation()

    @classmethod
    def update(
        cls,
        corpus: Corpus,
        index_dir: Path,
        progress: Progress | None = None,
        *,
        stale: Sequence[str],
        fresh: Sequence[str],
    ) -> str:
        """The index brought to ``corpus`` in place (``backends.tantivy.build.update_index``):
        the ``stale`` documents deleted by term, the ``fresh`` ones added; a new generation."""
        path = index_dir / cls.backend
        from backends.tantivy.build import update_index

        update_index(corpus, path, progress, stale=stale, fresh=fresh)
        write_contracts(path, generate_contracts(cls.contracts(), corpus.corpus_schema))
        return cls.open(index_dir).generation()

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        started = time.perf_counter()
        path = index_dir / cls.backend
        manifest_path = path / "race.json"
        if not (path / "meta.json").exists() or not manifest_path.exists():
            raise IndexMissingError("no tantivy index here (run `race index`)", where=str(path))
        try:
            index = tantivy.Index.open(str(path))
        except ValueError as exc:  # tantivy's error for a corrupt or unreadable index
            why = " ".join(str(exc).split())[:200]
            raise IndexMissingError(
                f"tantivy cannot open it ({why}); rebuild with `race index`", where=str(path / "meta.json")
            ) from None
        index.register_tokenizer(ANALYZER, _analyzer())
        manifest = read_json(manifest_path.read_bytes(), where=str(manifest_path), error=IndexMissingError)
        adapter = cls(path, index, schema_of(manifest))
        adapter.generated_contracts = read_contracts(path)
        adapter.corpus_schema = schema_of(manifest)
        _log.debug("tantivy %s opened in %.1f ms", path, (time.perf_counter() - started) * 1e3)
        return adapter

    @property
    def identity(self) -> str:
        return f"tantivy:{self._current().corpus_revision}"

    @property
    def reads_generation_inline(self) -> bool:
        return True  # a stat of meta.json, read again only when it changed

    @property
    def pins_inline(self) -> bool:
        return True  # that stat, and a searcher over the state the reader holds

    def generation(self) -> str:
        """The index id, opstamp, segment ids and their delete counts of the state the reader holds.

        tantivy replaces meta.json on every commit, so an unchanged (inode, mtime, size)
        means an unchanged generation; only a changed file is reloaded and read again (with
        ``race.json``, which a rebuild replaces along with the index).
        """
        return self._current().generation

    def _current(self) -> _State:
        pin = self._pin
        if pin is not None:
            return pin.state
        st = os.stat(self._meta_path)
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        # The memo is one immutable object, replaced whole, so reading it needs no lock.
        state = self._state
        if state is not None and state.stamp == stamp:
            return state
        with self._generation_lock:
            return self._reload(stamp)

    def _reload(self, stamp: tuple[int, int, int]) -> _State:
        """Reload the reader and read the state it now holds; the caller holds the lock."""
        state = self._state
        if state is not None and state.stamp == stamp:
            return state
        for _ in range(_STAMP_TRIES):
            self._index.reload()
            meta = json.loads(Path(self._meta_path).read_text())
            manifest = json.loads(self._manifest_path.read_text())
            st = os.stat(self._meta_path)
            after = (st.st_ino, st.st_mtime_ns, st.st_size)
            if after == stamp:
                break
            # A commit replaced meta.json while it was read: the reader may hold either state.
            stamp = after
        else:
            raise BackendUnavailable("meta.json kept changing while it was read", where=self._meta_path)
        state = _State(
            stamp=stamp,
            generation=_generation_of(meta, manifest),
            corpus_revision=str(manifest["corpus_revision"]),
            rows=int(manifest.get("rows", 0)),
            value_counts=manifest.get("value_counts", {}),
        )
        self._state = state
        return state

    def _hold(self) -> _Pin:
        """The latest state and a searcher over exactly it."""
        pin = self._pin
        if pin is not None:
            return pin
        st = os.stat(self._meta_path)
        with self._generation_lock:
            state = self._reload((st.st_ino, st.st_mtime_ns, st.st_size))
            return _Pin(state, self._index.searcher())

    def pinned(self, generation: str) -> Adapter:
        """A searcher over ``generation`` held for the run. The reader holds one state, the
        latest this adapter loaded, so only that generation can be pinned."""
        try:
            pin = self._hold()
        except (OSError, ValueError, KeyError, BackendUnavailable) as exc:
            reason = f"cannot be read ({type(exc).__name__}: {exc})"
            return RefusedSnapshot(self, planned=generation, current=UNKNOWN_GENERATION, reason=reason)
        current = pin.state.generation
        if current != generation:
            return RefusedSnapshot(self, planned=generation, current=current, reason="is no longer the index's state")
        held = copy.copy(self)
        held._pin = pin
        return held

    def statistics(self) -> BackendStatistics:
        state = self._current()
        return BackendStatistics(backend=self.backend, rows=state.rows, value_counts=state.value_counts)

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def scan_call(self, request: ScanRequest) -> Callable[[], ScanResult]:
        return partial(self._scan, request)

    # -- blocking part, on a worker thread -------------------------------------------------

    def _scan(self, request: ScanRequest) -> ScanResult:
        pin = self._hold()
        generation = pin.state.generation
        if request.mode == "bm25":
            query, kind = self._text_query(request), ScoreKind.BM25
        elif request.mode == "exact_id":
            query, kind = self._identifier_query(request), ScoreKind.EXACT_MATCH
        else:
            raise BackendUnavailable(f"tantivy has no mode {request.mode!r}", where=request.rsc_id)
        if request.pushed:
            query = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, query),
                    (tantivy.Occur.Must, tantivy.Query.const_score_query(self._filter_query(request.pushed), 0.0)),
                ]
            )
        searcher = pin.searcher
        # An exact set is cut in chunk-id order, so the whole match set is read; a ranked
        # list reads past k so that ties at the cut are broken by chunk id, not segment order.
        limit = _EXACT_SET_CAP if kind is ScoreKind.EXACT_MATCH else 2 * request.k + 8
        try:
            found = searcher.search(query, limit=limit, count=True)
        except ValueError as exc:
            raise BackendUnavailable(f"tantivy search failed: {exc}", where=request.rsc_id) from exc
        scored = sorted(((float(score), address) for score, address in found.hits), key=lambda p: -p[0])
        if kind is not ScoreKind.EXACT_MATCH and len(scored) > request.k:
            # Only documents that can still make the cut (ties with the k-th score) are read.
            cut = scored[request.k - 1][0]
            scored = [p for p in scored if p[0] >= cut]
        rows = [(score, orjson.loads(searcher.doc(address)["row"][0])) for score, address in scored]
        if kind is ScoreKind.EXACT_MATCH:
            rows.sort(key=lambda r: str(r[1]["chunk_id"]))
        else:
            rows.sort(key=lambda r: (-r[0], str(r[1]["chunk_id"])))
        rows = rows[: request.k]
        hits = custody_hits(
            request=request,
            contract_ref=f"{request.rsc_id}@{request.rsc_version}",
            rows=[(row, score) for score, row in rows],
            score_kind=kind,
            index_identity=f"tantivy:{pin.state.corpus_revision}",
            generation=generation,
            corpus_revision=pin.state.corpus_revision,
        )
        count = getattr(found, "count", None)
        total = int(count) if count is not None else len(hits)
        gaps: list[Gap] = []
        if kind is ScoreKind.EXACT_MATCH and total > len(hits):
            gaps.append(
                self.gap(
                    request,
                    GapKind.RESOURCE_LIMITED,
                    f"exact lookup matched {total} chunks; k={request.k} returned {len(hits)}",
                )
            )
        return ScanResult(
            hits=tuple(hits), gaps=tuple(gaps), generation=generation, total_matches=total, exhausted=total <= len(hits)
        )

    def _terms(self, text: str) -> list[str]:
        return sorted(set(self._analyzer.analyze(text)))

    def _text_query(self, request: ScanRequest) -> tantivy.Query:
        """The BM25 query of the request's text. Queries are immutable and depend on the text
        alone (the analyzer and schema are the index's), so the last texts' are remembered: a
        repeated query is not analysed and built again on every scan."""
        text = request.query.text or ""
        with self._queries_lock:
            query = self._queries.get(text)
            if query is not None:
                self._queries.move_to_end(text)
                return query
        terms = self._terms(text)
        if not terms:
            query = tantivy.Query.empty_query()
        else:
            clauses = [
                (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, field, term))
                for term in terms
                for field in TEXT_FIELDS
            ]
            query = tantivy.Query.boolean_query(clauses)
        with self._queries_lock:
            self._queries[text] = query
            if len(self._queries) > _QUERIES_KEPT:
                self._queries.popitem(last=False)
        return query

    def _identifier_query(self, request: ScanRequest) -> tantivy.Query:
        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        for ident in request.query.ids:
            for field in ("chunk_id", "doc_id"):
                clauses.append((tantivy.Occur.Should, tantivy.Query.term_query(self._schema, field, ident)))
        text = (request.query.text or "").strip()
        if text:
            words = self._analyzer.analyze(text)
            for field in TEXT_FIELDS:
                if len(words) == 1:
                    phrase = tantivy.Query.term_query(self._schema, field, words[0])
                elif words:
                    phrase = tantivy.Query.phrase_query(self._schema, field, list[str | tuple[int, str]](words))
                else:
                    continue
                clauses.append((tantivy.Occur.Should, phrase))
        if not clauses:
            return tantivy.Query.empty_query()
        return tantivy.Query.const_score_query(tantivy.Query.boolean_query(clauses), 1.0)

    def _filter_query(self, filters: tuple[Filter, ...]) -> tantivy.Query:
        return filter_query(self._schema, self._fields, filters)
