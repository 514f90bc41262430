"""An evaluation run as a stream: queries in bounded batches, each query's receipts reduced to
its runs and work orders at once and released, the report scored from the reduced state.

Per query, every strategy asked answers with ``k`` *documents*: a document ranks where its best
chunk ranks (MaxP), and the strategy reads ``CHUNKS_PER_DOCUMENT * k`` chunks first, then twice
as many while it has fewer than ``k`` documents, the backends still had more, and an obligation
allows it (``MAX_CHUNKS``). Work orders (``race.evaluation.evaluate.work_orders``) need deep
legs only for a query with a relevant document missed in the top cutoff, and only the legs of
the strategies asked (hybrid: lexical and conceptual), ``deep_k`` documents deep.

The evaluation's receipts bypass the engine's receipt cache (``cache=False``): nothing of a
query outlives its record. At most ``concurrency`` queries run at once, and a window of
``4 * concurrency`` records waits for a slower predecessor (``race.evaluation.batch.run_outcomes``),
so memory is the reduced runs (document ids) plus a bounded number of receipts, whatever the
number of queries. With a state file the records are appended as queries finish and a later
evaluation of the same queries, judgments and settings keeps them (``race.evaluation.eval_state``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from planner import PlanInput
from race.evaluation.batch import run_outcomes
from race.evaluation.eval_state import QueryRecord, Run, StateFile, check_run_names, write_trec_runs
from race.evaluation.evaluate import (
    STRATEGIES,
    EvalQuery,
    Judgment,
    LabelledPlan,
    Ranking,
    ranking,
    strategy_plan,
    work_orders,
)
from race.evaluation.stats import MEASURES, EvalReport, score_runs
from race.receipt import Receipt
from rsc import InputError, fingerprint

CHUNKS_PER_DOCUMENT = 3
"""Chunks read per document asked at first (a document holds several chunks of a hit)."""
MAX_CHUNKS = 1000
"""The most chunks one obligation may ask (a seek_support obligation's bound of ``k``)."""
LEGS: dict[str, tuple[str, ...]] = {
    "lexical": ("lexical",),
    "conceptual": ("conceptual",),
    "hybrid": ("lexical", "conceptual"),
    "exact": ("exact",),
}
"""The legs a strategy's work orders place a missed document in."""
DOCUMENTS = "MaxP"
"""How chunk hits become document ranks: a document ranks where its best chunk does."""


class Evaluator(Protocol):
    """What an evaluation runs its plans on: an engine (``race.engine.Engine``)."""

    def run(self, plan: PlanInput, *, where: str = "plan", cache: bool = True) -> Awaitable[Receipt]: ...

    def generations(self) -> dict[str, str]: ...


async def documents(engine: Evaluator, query: EvalQuery, strategy: str, *, k: int) -> tuple[Ranking, int]:
    """``strategy``'s top ``k`` documents for ``query`` (MaxP), and the chunks read for them."""
    chunks = min(MAX_CHUNKS, CHUNKS_PER_DOCUMENT * k)
    while True:
        plan = strategy_plan(query, strategy, k=chunks)
        receipt = await engine.run(plan, where=f"query {query.id} ({strategy})", cache=False)
        answer, returned = ranking(receipt, root="q"), len(receipt.evidence)
        del receipt
        if len(answer.docs) >= k or returned < chunks or chunks >= MAX_CHUNKS or answer.not_scored:
            kept = answer.docs[:k]
            meta = {d: answer.metadata[d] for d in kept if d in answer.metadata}
            return answer.model_copy(update={"docs": kept, "metadata": meta}), chunks
        chunks = min(MAX_CHUNKS, chunks * 2)


def query_source(query: EvalQuery, relevant: Mapping[str, int], settings: Mapping[str, Any]) -> str:
    return fingerprint({"query": query.model_dump(mode="json"), "relevant": dict(relevant), "settings": settings})


async def evaluate_query(
    engine: Evaluator,
    query: EvalQuery,
    relevant: Mapping[str, int],
    *,
    strategies: Sequence[str],
    plans: Sequence[LabelledPlan],
    k: int,
    deep_k: int,
    cutoff: int,
    source: str,
) -> QueryRecord:
    """One query's record: every strategy's (and labelled plan's) run, and its work orders."""
    answers: dict[str, Ranking] = {}
    chunks: dict[str, int] = {}
    for strategy in strategies:
        answers[strategy], chunks[strategy] = await documents(engine, query, strategy, k=k)
    for p in plans:
        receipt = await engine.run(p.plan, where=f"plan {p.query}", cache=False)
        answers[p.strategy], chunks[p.strategy] = ranking(receipt, root=str(p.plan.get("root", ""))), 0
        del receipt
    wanted = {d for d, g in relevant.items() if g > 0}
    missed = any(wanted - set(a.docs[:cutoff]) for a in answers.values())
    legs: dict[str, Ranking] = {}
    read: dict[str, int] = {}
    if missed:
        for leg in sorted({leg for s in strategies for leg in LEGS[s]}):
            legs[leg], read[leg] = await documents(engine, query, leg, k=deep_k)
    orders = [
        order
        for name, answer in answers.items()
        for order in work_orders(query, name, answer, legs, relevant, cutoff=cutoff)
    ]
    runs = {name: Run(docs=a.docs, not_scored=a.not_scored, chunks=chunks[name]) for name, a in answers.items()}
    return QueryRecord(query=query.id, source=source, runs=runs, orders=tuple(orders), legs=read)


def judged(queries: Sequence[EvalQuery], judgments: Sequence[Judgment]) -> dict[str, dict[str, int]]:
    """Query -> document -> grade (the highest given), for the queries of the set."""
    ids = {q.id for q in queries}
    relevant: dict[str, dict[str, int]] = {}
    for j in judgments:  # judgments of queries outside the set are not this evaluation's
        if j.query in ids:
            relevant.setdefault(j.query, {})[j.doc] = max(j.grade, relevant.get(j.query, {}).get(j.doc, 0))
    return relevant


def check_plans(queries: Sequence[EvalQuery], plans: Sequence[LabelledPlan], strategies: Sequence[str]) -> None:
    ids = {q.id for q in queries}
    covered: dict[str, set[str]] = {}
    for p in plans:
        if p.query not in ids:
            raise InputError(f"plan for unknown query {p.query!r}", where="plans")
        if p.strategy in strategies:
            raise InputError(f"strategy {p.strategy!r} is also a built-in strategy of this run", where="plans")
        covered.setdefault(p.strategy, set()).add(p.query)
    for name, answered in sorted(covered.items()):
        # A strategy is compared on the same queries as the others, or not at all.
        if answered != ids:
            raise InputError(f"strategy {name!r} has plans for {len(answered)} of {len(ids)} queries", where="plans")


def default_k(measures: Sequence[str] | None) -> int:
    """Documents a strategy returns by default: the largest cutoff of the measures, at least 10."""
    from race.evaluation.stats import ir_measures

    irm = ir_measures()
    cutoffs = [int(irm.parse_measure(m).params.get("cutoff") or 0) for m in measures or MEASURES]
    return min(MAX_CHUNKS, max(10, *cutoffs))


def parse_measures(measures: Sequence[str]) -> tuple[str, ...]:
    """The measures as given, each checked by ir-measures' parser (bad input names it)."""
    from race.evaluation.stats import ir_measures

    irm = ir_measures()
    out = []
    for m in measures:
        try:
            irm.parse_measure(m)
        except Exception as exc:  # ir-measures raises NameError, ValueError, SyntaxError…
            raise InputError(f"not an ir-measures measure: {m!r}", where="--metrics") from exc
        out.append(m)
    if not out:
        raise InputError("no measure given", where="--metrics")
    if len(set(out)) != len(out):
        raise InputError("a measure is given twice", where="--metrics")
    return tuple(out)


async def evaluate(
    engine: Evaluator,
    queries: Sequence[EvalQuery],
    judgments: Sequence[Judgment],
    *,
    strategies: Sequence[str] = tuple(STRATEGIES),
    plans: Sequence[LabelledPlan] = (),
    k: int = 10,
    deep_k: int | None = None,
    cutoff: int = 10,
    measures: Sequence[str] = MEASURES,
    samples: int = 2000,
    seed: int = 7,
    concurrency: int = 4,
    state: Path | None = None,
    export_runs: Path | None = None,
    progress: Callable[[int], Callable[[QueryRecord], None]] | None = None,
) -> EvalReport:
    """Run every strategy (``k`` documents each) and labelled plan over the judged queries of the
    set and score them. ``deep_k`` (default ``4 * k``) is the depth of the work-order legs;
    ``state`` a JSONL file of per-query records to resume from and append to; ``export_runs`` a
    folder for one TREC run file per strategy; ``progress(total)`` the callback told of every
    query's record as it is made."""

    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise InputError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})", where="--strategies")
    if k < 1 or k > MAX_CHUNKS:
        raise InputError(f"must be between 1 and {MAX_CHUNKS}, not {k}", where="--k")
    deep = 4 * k if deep_k is None else deep_k
    if deep < 1 or deep > MAX_CHUNKS:
        raise InputError(f"must be between 1 and {MAX_CHUNKS}, not {deep}", where="--deep-k")
    measures = parse_measures(measures)
    check_plans(queries, plans, strategies)
    names = [*strategies, *dict.fromkeys(p.strategy for p in plans)]
    if export_runs is not None:
        check_run_names(names, export_runs)
    relevant = judged(queries, judgments)
    unjudged = [q.id for q in queries if q.id not in relevant]
    todo_queries = [q for q in queries if q.id in relevant]
    settings: dict[str, Any] = {
        "k": k,
        "deep_k": deep,
        "cutoff": cutoff,
        "samples": samples,
        "seed": seed,
        "measures": list(measures),
        "documents": DOCUMENTS,
        "unjudged_queries": unjudged,
    }
    run_settings = {"k": k, "deep_k": deep, "cutoff": cutoff, "strategies": list(strategies)}
    by_plan: dict[str, list[LabelledPlan]] = {}
    for p in plans:
        by_plan.setdefault(p.query, []).append(p)
    sources = {
        q.id: query_source(
            q, relevant[q.id], {**run_settings, "plans": [p.model_dump(mode="json") for p in by_plan.get(q.id, [])]}
        )
        for q in todo_queries
    }
    kept: dict[str, QueryRecord] = {}
    store = StateFile(state) if state is not None else None
    if store is not None:
        kept = store.resume(sources)
    todo = [q for q in todo_queries if q.id not in kept]
    told = progress(len(todo)) if progress is not None else None
    records: dict[str, QueryRecord] = dict(kept)

    async def one(index: int) -> QueryRecord:
        q = todo[index]
        return await evaluate_query(
            engine,
            q,
            relevant[q.id],
            strategies=strategies,
            plans=by_plan.get(q.id, []),
            k=k,
            deep_k=deep,
            cutoff=cutoff,
            source=sources[q.id],
        )

    def emit(_: int, record: QueryRecord) -> None:
        if store is not None:
            store.append(record)
        records[record.query] = record
        if told is not None:
            told(record)

    try:
        await run_outcomes(one, len(todo), concurrency=concurrency, emit=emit)
    finally:
        if store is not None:
            store.close()
    ordered = [records[q.id] for q in todo_queries]
    if export_runs is not None:
        write_trec_runs(ordered, names, export_runs)
    return score_records(
        ordered,
        relevant,
        {q.id: q.category for q in queries},
        names=names,
        settings=settings,
        generations=engine.generations(),
    )


def score_records(
    records: Sequence[QueryRecord],
    relevant: Mapping[str, Mapping[str, int]],
    categories: Mapping[str, str],
    *,
    names: Sequence[str],
    settings: Mapping[str, Any],
    generations: Mapping[str, str],
) -> EvalReport:
    """The report of the reduced records, one per judged query in query-set order."""
    runs = {s: {r.query: r.runs[s].docs for r in records} for s in names}
    not_scored = {s: {r.query: why for r in records if (why := r.runs[s].not_scored) is not None} for s in names}
    reading = {
        s: {
            "chunks_read": sum(r.runs[s].chunks for r in records),
            "short": sum(len(r.runs[s].docs) < int(settings["k"]) for r in records),
        }
        for s in names
    }
    orders = [o for s in names for r in sorted(records, key=lambda r: r.query) for o in r.orders if o.strategy == s]
    return score_runs(
        runs,
        relevant,
        categories,
        orders,
        not_scored=not_scored,
        settings={**settings, "reading": reading},
        generations=generations,
    )
