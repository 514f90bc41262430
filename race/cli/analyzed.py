"""``race run --analyze``: the analysis of a run as text for people, or as one self-contained
HTML page (inline CSS, no script, no network, no external reference) with the tree, estimates
against actuals and the gaps."""

from __future__ import annotations

import argparse
import sys
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from race.cli.arguments import canonical_pretty

if TYPE_CHECKING:
    from race.analysis import Analysis, NodeAnalysis
    from race.receipt import Receipt

_PHASES = ("setup", "plan", "pins", "legs", "fusion", "receipt")


def _num(value: float | int | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{round(value, 3):g}{unit}"


def _phases(analysis: Analysis) -> list[tuple[str, float]]:
    known = [(p, analysis.phases[p]) for p in _PHASES if p in analysis.phases]
    return known + sorted((p, v) for p, v in analysis.phases.items() if p not in _PHASES)


def analysis_text(analysis: Analysis) -> str:
    q = analysis.q_error
    lines = [
        f"plan        {analysis.plan}",
        f"physical    {analysis.physical}",
        f"statistics  {analysis.statistics}",
        f"wall        {analysis.wall_ms:g} ms (set-up before the clock: {analysis.phases.get('setup', 0.0):g} ms)",
        "time        " + ", ".join(f"{p} {v:g} ms" for p, v in _phases(analysis)),
        f"q-error     latency max {_num(q.latency_max)} median {_num(q.latency_median)};"
        f" rows max {_num(q.rows_max)} median {_num(q.rows_median)} (over {q.scans} scans run against a backend)",
        "",
        "physical (estimated -> actual):",
    ]
    for node in analysis.nodes:
        lines += _node_lines(node)
    lines += ["", f"gaps ({len(analysis.gaps)}):"]
    lines += [f"  {gap}" for gap in analysis.gaps]
    return "\n".join(lines) + "\n"


def _node_lines(node: NodeAnalysis) -> list[str]:
    pad = "  " * (node.depth + 1)
    head = f"{pad}{node.kind} {node.node} [G{node.group}] {node.name}"
    if node.kind == "scan":
        out = [
            f"{head}  time {_num(node.estimated_ms, ' ms')} -> {_num(node.actual_ms, ' ms')}"
            f" (q {_num(node.q_error_ms)})  rows {_num(node.estimated_rows)} -> {_num(node.actual_rows)}"
            f" (q {_num(node.q_error_rows)})",
            f"{pad}  candidates est {_num(node.estimated_candidates)}; model calls {_num(node.model_calls_planned)}"
            f" -> {_num(node.model_calls_made)}; cache {node.cache or '-'}; outcome {node.outcome}",
        ]
        if node.recall:
            out.append(f"{pad}  recall promised: {node.recall}")
        return out
    if node.kind == "hybrid":
        return [f"{head}  time {_num(node.estimated_ms, ' ms')} -> {_num(node.actual_ms, ' ms')} (slowest leg)"]
    if node.kind == "operator":
        return [f"{head}  estimated {_num(node.estimated_ms, ' ms')}"]
    return [f"{head}  (no contract may serve it)"]


_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
code, td.mono { font-family: ui-monospace, monospace; font-size: 12px; }
table { border-collapse: collapse; margin-top: .5em; }
th, td { border: 1px solid #d0d0d5; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.operator td { background: #fafafa; } tr.notrun td { color: #888; }
.bad { color: #a40000; font-weight: 600; } .ok { color: #1a6b1a; }
.bar { display: inline-block; height: 10px; background: #5b7bd5; vertical-align: middle; }
ul.gaps li { margin: .2em 0; } .gap { color: #a40000; }
#tree td:last-child { max-width: 22em; overflow-wrap: anywhere; }
"""


def analysis_html(analysis: Analysis, *, title: str = "race run --analyze") -> str:
    """One page: everything inline, nothing fetched."""
    q = analysis.q_error
    rows = "\n".join(_html_row(n) for n in analysis.nodes)
    total = sum(v for _, v in _phases(analysis)) or 1.0
    phases = "\n".join(
        f'<tr><td>{escape(p)}</td><td class="num">{v:g} ms</td>'
        f'<td><span class="bar" style="width:{max(1, round(300 * v / total))}px"></span></td></tr>'
        for p, v in _phases(analysis)
    )
    gaps = "\n".join(f'<li class="gap">{escape(g)}</li>' for g in analysis.gaps) or "<li>none</li>"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{escape(title)}</h1>
<p>plan <code>{escape(analysis.plan)}</code><br>physical <code>{escape(analysis.physical)}</code><br>
statistics <code>{escape(analysis.statistics)}</code></p>
<p id="q-error">q-error: latency max {_num(q.latency_max)}, median {_num(q.latency_median)};
rows max {_num(q.rows_max)}, median {_num(q.rows_median)} (over {q.scans} scans run against a backend).
Wall {analysis.wall_ms:g} ms.</p>
<h2>Plan tree: estimated against actual</h2>
<table id="tree">
<tr><th>node</th><th>kind</th><th>what</th><th>est ms</th><th>actual ms</th><th>q (time)</th>
<th>est rows</th><th>rows</th><th>q (rows)</th><th>est candidates</th><th>model calls</th><th>cache</th>
<th>outcome</th><th>recall promised</th></tr>
{rows}
</table>
<h2>Where the time went</h2>
<table id="phases">
{phases}
</table>
<h2>Gaps ({len(analysis.gaps)})</h2>
<ul class="gaps">
{gaps}
</ul>
</body>
</html>
"""


def _html_row(node: NodeAnalysis) -> str:
    indent = "&nbsp;&nbsp;" * node.depth
    css = node.kind + (" notrun" if node.outcome == "not run" else "")

    def q(value: float | None) -> str:
        if value is None:
            return "-"
        return f'<span class="{"bad" if value >= 10 else "ok"}">{value:g}</span>'

    calls = (
        f"{_num(node.model_calls_planned)} &rarr; {_num(node.model_calls_made)}"
        if node.model_calls_planned is not None
        else "-"
    )
    cells = [
        f'<td class="mono">{indent}{escape(node.node)} [G{node.group}]</td>',
        f"<td>{escape(node.kind)}</td>",
        f'<td class="mono">{escape(node.name)}</td>',
        f'<td class="num">{_num(node.estimated_ms)}</td>',
        f'<td class="num">{_num(node.actual_ms)}</td>',
        f'<td class="num">{q(node.q_error_ms)}</td>',
        f'<td class="num">{_num(node.estimated_rows)}</td>',
        f'<td class="num">{_num(node.actual_rows)}</td>',
        f'<td class="num">{q(node.q_error_rows)}</td>',
        f'<td class="num">{_num(node.estimated_candidates)}</td>',
        f'<td class="num">{calls}</td>',
        f"<td>{escape(node.cache or '-')}</td>",
        f"<td>{escape(node.outcome or '-')}</td>",
        f"<td>{escape(node.recall or '-')}</td>",
    ]
    return f'<tr class="{css}">' + "".join(cells) + "</tr>"


def write_run(receipt: Receipt, fmt: str, *, analyze: bool, title: str) -> str:
    """What ``race run`` prints: the receipt (text or JSON, with ``operational.analysis`` when
    analyzed), or with ``--analyze`` the analysis as text or one HTML page."""
    from race.cli.render import receipt_json, receipt_text

    if fmt == "json":
        return receipt_json(receipt)
    analysis = receipt.operational.analysis
    if not analyze or analysis is None:
        return receipt_text(receipt)
    return analysis_html(analysis, title=title) if fmt == "html" else analysis_text(analysis)


def add_stats_command(sub: Any) -> None:
    p = sub.add_parser("stats", help="learned statistics files (race run --record-stats)")
    stats_sub = p.add_subparsers(dest="stats_command", required=True)
    show = stats_sub.add_parser("show", help="summarise a statistics file per contract")
    show.add_argument("file", help="the JSONL file race run --record-stats appended to")
    show.add_argument("--json", action="store_true", help="the summary as canonical JSON")
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    from race.state.learned import load_learned, summary_text

    learned = load_learned(Path(args.file))
    summaries = learned.summary()
    if args.json:
        body = {"digest": learned.digest, "observations": len(learned.observations), "contracts": list(summaries)}
        sys.stdout.write(canonical_pretty(body) + "\n")
    else:
        sys.stdout.write(summary_text(learned, summaries))
    return 0
