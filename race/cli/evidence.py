"""The evidence-quality commands of ``race``: ``verify``, ``context``, ``cite`` and ``eval``.

They read a receipt (or a query set) and the corpus it cites; ``race.cli.main`` registers them
with ``add_evidence_commands``."""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from race.cli.arguments import INDEX_HELP, canonical_pretty
from rsc import InputError

if TYPE_CHECKING:
    from race.receipt import Receipt


def corpus_of(receipt: Receipt, given: str | None) -> Path:
    """The corpus a receipt's citations are read from: ``--corpus`` when given, else the one
    the receipt records (its index's); stated on standard error, refused when it is not there."""
    if given:
        corpus, how = Path(given), "--corpus"
    elif receipt.corpus is not None:
        corpus, how = Path(receipt.corpus), "recorded in the receipt"
    else:
        why = "the receipt records no corpus (its index predates corpus roots); pass --corpus"
        raise InputError(why, where="--corpus")
    if not corpus.exists():
        moved = "" if given else "; was it moved? pass --corpus"
        raise InputError(f"no such corpus folder or JSONL file ({how}){moved}", where=str(corpus))
    print(f"race: reading the cited files under {corpus} ({how})", file=sys.stderr)
    return corpus


def cmd_verify(args: argparse.Namespace) -> int:
    from race.evidence.verify import EXIT_CITATION_BROKEN, verify_receipt, verify_text
    from race.state.replay import load_receipt

    receipt = load_receipt(Path(args.receipt))
    report = verify_receipt(receipt, corpus_of(receipt, args.corpus))
    sys.stdout.write(canonical_pretty(report) + "\n" if args.json else verify_text(report))
    return 0 if report.holds else EXIT_CITATION_BROKEN


def cmd_context(args: argparse.Namespace) -> int:
    from race.evidence.packet import build_packet
    from race.state.replay import load_receipt

    receipt = load_receipt(Path(args.receipt))
    packet = build_packet(
        receipt,
        corpus_of(receipt, args.corpus),
        max_chars=args.max_chars,
        max_tokens=args.max_tokens,
        tokenizer=args.tokenizer,
    )
    sys.stdout.write(canonical_pretty(packet) + "\n" if args.json else packet.text)
    approx = " (approximate)" if packet.tokens_approximate else ""
    cut = sum(p.shortened_from is not None for p in packet.passages)
    shortened = f" ({cut} shortened to fit)" if cut else ""
    print(
        f"race: packet of {len(packet.passages)} passages{shortened}, {packet.chars} of {packet.max_chars} characters "
        f"({packet.quoted_chars} quoted, {packet.chars - packet.quoted_chars} header and citations), "
        f"{packet.tokens} tokens{approx} by {packet.tokenizer}",
        file=sys.stderr,
    )
    return 0


def cmd_cite(args: argparse.Namespace) -> int:
    from race.evidence.cite import cite_answer, cite_text, load_answer, load_packet
    from race.evidence.verify import EXIT_CITATION_BROKEN
    from race.indexing.bundled import BUNDLED_CORPUS

    corpus = Path(args.corpus) if args.corpus else BUNDLED_CORPUS
    if not corpus.exists():
        raise InputError("no such corpus folder or JSONL file", where=str(corpus))
    packet = load_packet(Path(args.packet))
    if not args.corpus:
        # The default is the demo corpus: a packet of another corpus is refused, not reported missing.
        held = (h for h in packet.handles if not _bundled(corpus, h.source_path, h.source_hash))
        foreign = next((h.source_path for h in held), None)
        if foreign is not None:
            raise InputError(
                f"cites {foreign}, which the bundled corpus (the default) does not hold as indexed: give the "
                "corpus the packet was made from with --corpus",
                where=args.packet,
            )
    answer = sys.stdin.read() if args.answer == "-" else load_answer(Path(args.answer))
    report = cite_answer(packet, answer, corpus, packet_fingerprint=args.packet_fingerprint, where=args.packet)
    sys.stdout.write(canonical_pretty(report) + "\n" if args.json else cite_text(report))
    return 0 if report.holds else EXIT_CITATION_BROKEN


def _bundled(corpus: Path, source_path: str, source_hash: str) -> bool:
    """Whether the bundled corpus holds ``source_path`` with the bytes it was indexed with (its
    files never change: another corpus's file of the same name differs)."""
    path = corpus / source_path.partition("#")[0]
    return path.is_file() and "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() == source_hash


def cmd_eval(args: argparse.Namespace) -> int:
    import anyio
    from tqdm import tqdm

    from race.engine import Engine
    from race.evaluation.eval_state import QueryRecord
    from race.evaluation.evaluate import STRATEGIES, load_judgments, load_plans, load_queries
    from race.evaluation.report import markdown, plot
    from race.evaluation.streaming import default_k, parse_measures
    from race.extras import require

    # What the command needs is checked before anything runs or is written.
    require("ir_measures", feature="race eval", where="race eval")
    if args.out:
        require("matplotlib", feature="race eval --out (its plot)", where="--out")
    measures = parse_measures(args.metrics.replace(",", " ").split()) if args.metrics else None
    if args.concurrency < 1:
        raise InputError(f"must be at least 1, not {args.concurrency}", where="--concurrency")

    queries = load_queries(Path(args.queries))
    judgments = load_judgments(Path(args.qrels))
    plans = load_plans(Path(args.plans)) if args.plans else ()
    strategies = tuple(args.strategies.split(",")) if args.strategies else tuple(STRATEGIES)
    for name in strategies:
        if name not in STRATEGIES:
            raise InputError(f"unknown strategy {name!r} (one of {', '.join(STRATEGIES)})", where="--strategies")
    from race.cli.arguments import open_engine

    engine = open_engine(args)
    assert isinstance(engine, Engine)
    engine.compiled_queries = True  # an evaluation embeds every query
    bars: list[tqdm] = []

    def progress(total: int) -> Callable[[QueryRecord], None]:
        bars.append(tqdm(total=total, desc="eval", unit="query", file=sys.stderr, disable=None))
        return lambda _: bars[0].update(1)

    options: dict[str, Any] = {} if measures is None else {"measures": measures}

    async def run() -> object:
        return await engine.evaluate(
            queries,
            judgments,
            strategies=strategies,
            plans=plans,
            k=args.k if args.k is not None else default_k(measures),
            deep_k=args.deep_k,
            samples=args.samples,
            seed=args.seed,
            concurrency=args.concurrency,
            state=Path(args.state) if args.state else None,
            export_runs=Path(args.export_runs) if args.export_runs else None,
            progress=progress,
            **options,
        )

    try:
        report = anyio.run(run)
    finally:
        for bar in bars:
            bar.close()
    text = markdown(report, title=args.title)  # type: ignore[arg-type]
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.name}.json").write_text(canonical_pretty(report) + "\n")
        (out / f"{args.name}.md").write_text(text)
        plot(report, out / f"{args.name}.png")  # type: ignore[arg-type]
        print(f"race: wrote {out / args.name}.json, .md and .png", file=sys.stderr)
    if args.export_runs:
        print(f"race: wrote one TREC run file per strategy to {args.export_runs}", file=sys.stderr)
    sys.stdout.write(canonical_pretty(report) + "\n" if args.json else text)
    return 0


def add_evidence_commands(sub: Any) -> None:
    """Add the ``verify``, ``context``, ``cite`` and ``eval`` subcommands to ``race``'s subparsers."""
    p = sub.add_parser("verify", help="check that every citation of a receipt still holds (exit 3 if one does not)")
    p.add_argument("receipt", help="a receipt JSON written by `race run --json`")
    p.add_argument("--corpus", help="the corpus folder or JSONL file the receipt cites (default: the one it records)")
    p.add_argument("--json", action="store_true", help="the report as canonical JSON")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("context", help="a citable context packet of a receipt's evidence within a budget")
    p.add_argument("receipt", help="a receipt JSON written by `race run --json`")
    p.add_argument("--max-chars", type=int, required=True, metavar="N", help="at most N characters in all")
    p.add_argument("--max-tokens", type=int, metavar="N", help="and at most N tokens of --tokenizer")
    p.add_argument("--tokenizer", default="all-MiniLM-L6-v2", help="all-MiniLM-L6-v2 (exact) or chars/4 (estimate)")
    p.add_argument("--corpus", help="the corpus folder or JSONL file the receipt cites (default: the one it records)")
    p.add_argument("--json", action="store_true", help="the packet as canonical JSON (passages, gaps, text)")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("cite", help="check the [n] handles an answer cites against its packet (exit 3 if one fails)")
    p.add_argument("packet", help="the context packet JSON the answer was written from (`race context --json`)")
    p.add_argument("answer", help="the answer's text file, or - for standard input")
    p.add_argument("--corpus", help="the corpus folder or JSONL file the packet cites (default: the bundled corpus)")
    p.add_argument("--packet-fingerprint", metavar="FP", help="refuse the packet unless its fingerprint is FP")
    p.add_argument("--json", action="store_true", help="the report as canonical JSON")
    p.set_defaults(func=cmd_cite)

    p = sub.add_parser("eval", help="measure retrieval quality per strategy against graded relevance judgments")
    p.add_argument("queries", help="query set JSONL: {id, text, category?, handle?, hard_filters?} per line")
    p.add_argument("qrels", help="graded judgments: JSONL {query, doc, grade} or TREC qrels 'query 0 doc grade'")
    p.add_argument("--plans", help="labelled plans JSONL {query, strategy, plan} to evaluate beside the strategies")
    p.add_argument("--strategies", help="comma-separated subset of lexical,conceptual,hybrid,exact (default: all)")
    p.add_argument(
        "--k", type=int, help="documents each strategy returns (default: the largest cutoff of --metrics, at least 10)"
    )
    p.add_argument("--deep-k", type=int, help="documents deep the work-order legs read (default 4 k)")
    p.add_argument(
        "--metrics", help="ir-measures measures, e.g. 'nDCG@10 R@100 RR@10 P@5' (default nDCG@10 R@10 RR P@5)"
    )
    p.add_argument("--concurrency", type=int, default=4, help="queries run at once (default 4)")
    p.add_argument("--state", metavar="FILE", help="per-query records (JSONL): appended as queries finish; resumed")
    p.add_argument("--export-runs", metavar="DIR", help="write one TREC run file per strategy there (STRATEGY.run)")
    p.add_argument("--samples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=7, help="seed of the bootstrap and the paired test (default 7)")
    p.add_argument("--index", help=INDEX_HELP)
    p.add_argument("--catalog", metavar="FILE", help="the backend instances (race.catalog/1, TOML or JSON)")
    p.add_argument("--out", metavar="DIR", help="also write NAME.json, NAME.md and NAME.png there")
    p.add_argument("--name", default="eval", help="file name stem under --out (default eval)")
    p.add_argument("--title", default="Retrieval quality", help="heading of the markdown report")
    p.add_argument("--json", action="store_true", help="print the report as canonical JSON instead of markdown")
    p.set_defaults(func=cmd_eval, remote_timeout=5.0)
