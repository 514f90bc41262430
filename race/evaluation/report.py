"""An evaluation report as people read it: a markdown table and a PNG plot."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from race.evaluation.stats import EvalReport, Interval

_LABELS = {"nDCG@10": "nDCG@10", "R@10": "Recall@10", "RR": "MRR", "P@5": "P@5"}


def _label(measure: str) -> str:
    return _LABELS.get(measure, measure)


NOT_MEASURED = "not measured"
"""The cell of a strategy none of whose runs was scored: no number, and never 0."""


def _scored(report: EvalReport, strategy: str) -> tuple[str, str]:
    """The headline's ``scored`` and ``not scored`` cells of ``strategy``."""
    counts = report.scored.get(strategy)
    if counts is None:  # a report from before runs were told apart: every query was scored
        return f"{report.queries}", "0"
    why = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.not_scored.items()))
    return f"{counts.scored}", f"{sum(counts.not_scored.values())} ({why})" if why else "0"


def _interval(iv: Interval | None) -> str:
    return NOT_MEASURED if iv is None else f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def _best(values: list[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return max(measured) if measured else None


def _reading(report: EvalReport) -> str:
    """How the strategies' chunk hits became the document runs scored."""
    s = report.settings
    if s.get("documents") != "MaxP":  # a report from before runs were read in documents
        return f"each strategy reads k={s.get('k')} chunks, ranked as documents"
    reading = s.get("reading", {})
    per_query = ", ".join(
        f"{st} {r['chunks_read'] / max(1, report.queries):.0f}"
        + (f" ({r['short']} queries with fewer documents: no more were found)" if r.get("short") else "")
        for st, r in sorted(reading.items())
        if r.get("chunks_read")
    )
    return (
        f"each strategy returns k={s.get('k')} documents, a document ranked where its best chunk ranks (MaxP), "
        f"reading chunks until it has k documents (chunks read per query: {per_query or 'none'})"
    )


def markdown(report: EvalReport, *, title: str = "Retrieval quality", orders: int = 15) -> str:
    measures = list(report.settings.get("measures", ()))
    s = report.settings
    unjudged = list(s.get("unjudged_queries", ()))
    out = [
        f"# {title}",
        "",
        f"{report.queries} queries; {_reading(report)}; "
        f"measures by ir-measures; 95 % bootstrap intervals over queries ({s.get('samples')} resamples, "
        f"seed {s.get('seed')}); paired two-sided randomization tests.",
        "",
        "| strategy | scored | not scored | " + " | ".join(_label(m) for m in measures) + " | unjudged |",
        "|---|---:|---|" + "---|" * len(measures) + "---:|",
    ]
    best = {
        m: _best([iv.mean if (iv := report.overall[st][m]) else None for st in report.strategies]) for m in measures
    }
    for st in report.strategies:
        cells = list(_scored(report, st))
        for m in measures:
            iv = report.overall[st][m]
            text = _interval(iv)
            cells.append(f"**{text}**" if iv is not None and iv.mean == best[m] else text)
        out.append(f"| {st} | " + " | ".join(cells) + f" | {len(unjudged)} |")
    if unjudged:
        shown = ", ".join(unjudged[:20]) + (f", … ({len(unjudged) - 20} more)" if len(unjudged) > 20 else "")
        out += ["", f"{len(unjudged)} queries have no judgments and are not scored: {shown}."]
    if report.not_scored:
        out += [
            "",
            "Means are over the scored queries only: a run that did not search (a leg timed out or was "
            "cancelled, or a bound was met before the answer) is no measure of its strategy, "
            "neither a miss nor a hit.",
        ]
    head = measures[0] if measures else ""
    out += [
        "",
        f"## {_label(head)} by query category (best in bold)",
        "",
        "| category | " + " | ".join(report.strategies) + " | best |",
        "|---|" + "---:|" * len(report.strategies) + "---|",
    ]
    for cat, scores in sorted(report.by_category.items()):
        top = _best([scores[st][head] for st in report.strategies])
        cells = [
            NOT_MEASURED if (v := scores[st][head]) is None else (f"**{v:.3f}**" if v == top else f"{v:.3f}")
            for st in report.strategies
        ]
        winners = ", ".join(st for st in report.strategies if top is not None and scores[st][head] == top)
        out.append(f"| {cat} | " + " | ".join(cells) + f" | {winners} |")
    out += [
        "",
        "## Paired tests",
        "",
        "| a vs b | measure | mean(a) - mean(b) | p | a wins / loses / ties |",
        "|---|---|---:|---:|---|",
    ]
    for t in report.paired:
        if t.measure in measures[:2]:
            out.append(
                f"| {t.a} vs {t.b} | {_label(t.measure)} | {t.mean_difference:+.3f} | {t.p_value:.4f} | "
                f"{t.wins} / {t.losses} / {t.ties} |"
            )
    causes: Counter[tuple[str, str]] = Counter((o.strategy, str(o.cause)) for o in report.work_orders)
    kinds = ("ranking", "truncation", "gap", "filter")
    out += [
        "",
        f"## Work orders: relevant documents missed in the top {s.get('cutoff')}",
        "",
        "| strategy | " + " | ".join(kinds) + " | total |",
        "|---|" + "---:|" * (len(kinds) + 1),
    ]
    for st in report.strategies:
        n = [causes.get((st, c), 0) for c in kinds]
        out.append(f"| {st} | " + " | ".join(map(str, n)) + f" | {sum(n)} |")
    hybrid = [
        o for o in report.work_orders if o.strategy == ("hybrid" if "hybrid" in report.strategies else o.strategy)
    ]
    if hybrid:
        out += [
            "",
            f"First {min(orders, len(hybrid))} of {len(hybrid)} work orders of `{hybrid[0].strategy}` "
            "(grade-2 first; ranks are document ranks in each leg, `-` where the leg did not return it):",
            "",
            "| query | document | grade | cause | lexical | conceptual | exact |",
            "|---|---|---:|---|---:|---:|---:|",
        ]
        for o in sorted(hybrid, key=lambda o: (-o.grade, o.query, o.doc))[:orders]:
            r = [o.ranks.get(leg) for leg in ("lexical", "conceptual", "exact")]
            where = " | ".join("-" if x is None else str(x) for x in r)
            out.append(f"| {o.query} | {o.doc} | {o.grade} | {o.cause} | {where} |")
    return "\n".join(out) + "\n"


def plot(report: EvalReport, path: Path) -> None:
    """Grouped bars: the head measure per category and overall, per strategy, with intervals overall."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = list(report.settings.get("measures", ()))
    head = measures[0]
    groups = [*sorted(report.by_category), "overall"]
    width = 0.8 / max(1, len(report.strategies))
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    for i, st in enumerate(report.strategies):
        # A group the strategy has no scored query in gets no bar (not a bar of height 0).
        values = [report.by_category[g][st][head] for g in groups[:-1]]
        iv = report.overall[st][head]
        values.append(None if iv is None else iv.mean)
        xs = [x + i * width for x in range(len(groups))]
        drawn = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
        ax.bar([x for x, _ in drawn], [v for _, v in drawn], width, label=st)
        if iv is not None:
            ax.errorbar([xs[-1]], [iv.mean], yerr=[[iv.mean - iv.low], [iv.high - iv.mean]], fmt="none", ecolor="black")
    ax.set_xticks([x + width * (len(report.strategies) - 1) / 2 for x in range(len(groups))], groups)
    ax.set_ylabel(_label(head))
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{_label(head)} per strategy ({report.queries} queries; overall with 95 % bootstrap interval)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=len(report.strategies), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
