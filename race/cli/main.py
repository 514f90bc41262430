"""The ``race`` command line. Bad input gets one line naming the place, exit status 2,
and nothing written."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from race.cli.analyzed import add_stats_command
from race.cli.arguments import INDEX_HELP, CommandParser, canonical_pretty, index_named, open_engine, seconds
from race.cli.evidence import add_evidence_commands
from race.cli.index import add_index_commands
from race.cli.inspect import add_inspect_command
from race.cli.serve import add_serve_command
from race.indexing.attach import add_milvus_command
from race.version import __version__
from rsc import InputError, RaceError, ReplayError, most_specific

if TYPE_CHECKING:
    from planner import LogicalPlan

EXIT_BAD_INPUT = 2
EXIT_UNMET_MANDATORY = 3
"""``race run`` completed, but a ``mandatory`` obligation is not satisfied."""


def _parse_plan(name: str) -> LogicalPlan:
    """The plan of a file argument; ``-`` reads it from standard input."""
    from race.engine import Engine

    if name == "-":
        return Engine.parse(sys.stdin.buffer.read(), where="<stdin>")
    return Engine.parse(Path(name))


def cmd_plan(args: argparse.Namespace) -> int:
    from planner import render_json, render_text
    from planner.pictures import render_dot, render_mermaid
    from race.engine import Engine

    fmt = output_format(args, ("text", "json", "dot", "mermaid"))
    logical = _parse_plan(args.plan)
    engine = open_engine(args)
    assert isinstance(engine, Engine)
    explain = engine.plan_sync(logical, where=args.plan)
    renderers = {"text": render_text, "json": render_json, "dot": render_dot, "mermaid": render_mermaid}
    sys.stdout.write(renderers[fmt](explain))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from race.cli.analyzed import write_run
    from race.engine import Engine

    fmt = output_format(args, ("text", "json", "html"))
    if fmt == "html" and not args.analyze:
        raise InputError("--format html draws an analysis: add --analyze", where="--format")
    logical = _parse_plan(args.plan)
    engine = open_engine(args)
    assert isinstance(engine, Engine)
    retain = Path(args.retain) if args.retain else None
    receipt = engine.run_sync(logical, where=args.plan, retain=retain, analyze=args.analyze)
    sys.stdout.write(write_run(receipt, fmt, analyze=args.analyze, title=f"race run --analyze {args.plan}"))
    if retain is not None:
        from race.state.artifacts import receipt_path

        where = receipt_path(retain, receipt)
        print(f"race: retained {len(receipt.retained)} artifacts; receipt {where}", file=sys.stderr)
    unmet = receipt.unmet_mandatory()
    if unmet:
        print(f"race: mandatory obligations not satisfied: {', '.join(unmet)}", file=sys.stderr)
        return EXIT_UNMET_MANDATORY
    return 0


def output_format(args: argparse.Namespace, choices: tuple[str, ...]) -> str:
    """``--format``, or ``json`` for ``--json``; anything else is bad input."""
    fmt = args.format or ("json" if args.json else "text")
    if fmt not in choices:
        raise InputError(f"unknown format {fmt!r} (one of {', '.join(choices)})", where="--format")
    if args.json and fmt != "json":
        raise InputError(f"--json and --format {fmt} disagree", where="--format")
    return str(fmt)


def cmd_batch(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from race.evaluation.batch import LineResult
    from race.evaluation.batch_file import run_batch_file
    from race.options import EngineOptions

    if args.catalog and (args.index or args.remote):
        raise InputError("a catalog names every instance: leave out --index, --remote", where="--catalog")
    index = None
    if not args.catalog:
        index = index_named(args.index).resolve()
    options = EngineOptions(
        index=index,
        statistics=Path(args.stats).resolve() if args.stats else None,
        remotes=tuple(args.remote or ()),
        remote_timeout=args.remote_timeout,
        early_stop=not args.no_early_stop,
        catalog=Path(args.catalog).resolve() if args.catalog else None,
    )
    bars: list[tqdm] = []

    def progress(total: int) -> Callable[[LineResult], None]:
        bars.append(tqdm(total=total, desc="batch", unit="plan", file=sys.stderr, disable=None))
        return lambda _: bars[0].update(1)

    try:
        summary = run_batch_file(
            Path(args.plans), Path(args.out), options, concurrency=args.concurrency, ray=args.ray, progress=progress
        )
    finally:
        for bar in bars:
            bar.close()
    print(summary.describe(Path(args.out)), file=sys.stderr)
    for line, unmet in sorted(summary.unmet.items()):
        print(f"race: line {line}: mandatory obligations not satisfied: {', '.join(unmet)}", file=sys.stderr)
    return summary.exit_status


def cmd_replay(args: argparse.Namespace) -> int:
    from race.cli.render import receipt_json, receipt_text
    from race.engine import Engine

    receipt = Engine({}).replay_sync(Path(args.receipt), Path(args.retained))
    sys.stdout.write(receipt_json(receipt) if args.json else receipt_text(receipt))
    print(
        f"race: replayed {receipt.operational.replayed_artifacts} artifacts; normalized receipt identical "
        f"(lineage {receipt.lineage.id}, parent {receipt.lineage.parent})",
        file=sys.stderr,
    )
    return 0


def cmd_rsc(args: argparse.Namespace) -> int:
    from rsc import load_contract

    if args.rsc_command == "validate":
        if args.file == "-":
            from rsc import parse_contract

            contract = parse_contract(sys.stdin.buffer.read(), where="<stdin>")
        else:
            contract = load_contract(Path(args.file))
        if args.json:
            sys.stdout.write(canonical_pretty(contract) + "\n")
        else:
            print(f"ok {contract.ref} ({contract.backend}, mode {contract.mode})")
        return 0
    from backends import shipped_contracts

    index = getattr(args, "index", None)
    if index:
        # Only an index's own contracts need race.indexing.indexing, which imports every backend.
        from race.indexing.indexing import index_contracts

        contracts = index_contracts(Path(index))
    else:
        contracts = shipped_contracts(remote=True)
    if args.rsc_command == "list" and args.json:
        sys.stdout.write(canonical_pretty(list(contracts)) + "\n")
        return 0
    if args.rsc_command == "list":
        for c in contracts:
            filters = ", ".join(f"{k}:{v.support.value}" for k, v in sorted(c.filters.items()))
            print(
                f"{c.ref:<34} {c.backend:<8} {c.mode:<22} {','.join(q.value for q in c.query_classes):<28}"
                f" {c.coverage.claim.value}  [{filters}]"
            )
        return 0
    matches = [c for c in contracts if c.rsc_id == args.rsc_id or c.ref == args.rsc_id]
    if not matches:
        from rsc.suggest import did_you_mean

        hint = did_you_mean(args.rsc_id, [c.rsc_id for c in contracts])
        raise InputError(f"no contract {args.rsc_id!r}{hint} (see `race rsc list`)", where="rsc show")
    for c in matches:
        sys.stdout.write(canonical_pretty(c) + "\n")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from race.schemas import schema_text

    sys.stdout.write(schema_text(args.document))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from planner import render_text
    from race.cli.render import receipt_text
    from race.engine import Engine
    from race.indexing.bundled import SHOWCASE_PLAN, ensure_bundled_index

    cache = Path(args.cache_dir) if args.cache_dir else None
    index = ensure_bundled_index(cache, quiet=False)
    engine = Engine.open(index)
    print(f"== index: {index}")
    for backend, generation in engine.generations().items():
        print(f"   {backend}: {generation}")
    print(f"\n== race plan {SHOWCASE_PLAN.relative_to(SHOWCASE_PLAN.parents[2])} --explain\n")
    explain = engine.plan_sync(SHOWCASE_PLAN)
    sys.stdout.write(render_text(explain))
    print("\n== race run (receipt)\n")
    sys.stdout.write(receipt_text(engine.run_sync(SHOWCASE_PLAN)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="race", description="Physical-plan query engine for multi-backend retrieval.")
    parser.add_argument("--debug", action="store_true", help="on an internal error, print the traceback")
    parser.add_argument("--version", action="version", version=f"race {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    add_index_commands(sub)
    add_inspect_command(sub)

    for name, func, helptext in (
        ("plan", cmd_plan, "print the physical plan of a logical plan"),
        ("run", cmd_run, "execute a logical plan and print the receipt"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("plan", help="logical plan JSON file, or - for standard input")
        p.add_argument("--index", help=INDEX_HELP)
        p.add_argument("--catalog", metavar="FILE", help="the backend instances (race.catalog/1, TOML or JSON)")
        p.add_argument("--json", action="store_true", help="canonical JSON output (--format json)")
        formats = "text, json, dot or mermaid (a picture of the memo)" if name == "plan" else "text, json or html"
        p.add_argument("--format", help=f"output: {formats}; default text", metavar="FORMAT")
        p.add_argument(
            "--stats", help="statistics to plan with: race.stats/1 JSON (instead of the index's own) or learned JSONL"
        )
        p.add_argument("--remote", action="append", metavar="URL", help="base URL of a `race serve` server")
        p.add_argument("--remote-timeout", type=seconds, default=5.0, metavar="S", help="HTTP timeout (default 5 s)")
        if name == "run":
            p.add_argument("--retain", metavar="DIR", help="keep every leg's response as an artifact for replay")
            p.add_argument("--analyze", action="store_true", help="print the plan's estimates beside the run's actuals")
            p.add_argument("--record-stats", metavar="FILE", help="append the run's measurements to a statistics file")
            p.add_argument(
                "--no-early-stop",
                action="store_true",
                help="evaluate top-k unions in full even where early stop is admissible (same top k, slower)",
            )
        if name == "plan":
            p.add_argument(
                "--explain", action="store_true", help="show memo groups, alternatives and reasons (default)"
            )
        p.set_defaults(func=func)
    add_milvus_command(sub)

    p = sub.add_parser("batch", help="run every plan of a JSONL file; one receipt or error record per line")
    p.add_argument("plans", help='JSONL: one logical plan per line, or {"id": ..., "plan": {...}}')
    p.add_argument("--out", required=True, help="JSONL records to write; plans already answered there are skipped")
    p.add_argument("--concurrency", type=int, default=4, metavar="N", help="plans at once (default 4); Ray actors")
    p.add_argument(
        "--ray", nargs="?", const="local", metavar="ADDRESS", help="run on Ray ('local', the default, or an address)"
    )
    p.add_argument("--index", help=INDEX_HELP)
    p.add_argument("--catalog", metavar="FILE", help="the backend instances (race.catalog/1, TOML or JSON)")
    p.add_argument("--stats", help="operational statistics JSON to plan with instead of the index's own")
    p.add_argument("--remote", action="append", metavar="URL", help="base URL of a `race serve` server")
    p.add_argument("--remote-timeout", type=float, default=5.0, metavar="S", help="HTTP timeout (default 5 s)")
    p.add_argument("--no-early-stop", action="store_true", help="evaluate top-k unions in full")
    p.set_defaults(func=cmd_batch)

    p = sub.add_parser("rsc", help="the retrieval semantic contracts known, and their checks")
    rsc_sub = p.add_subparsers(dest="rsc_command", required=True)
    listing = rsc_sub.add_parser("list", help="every known contract")
    listing.add_argument("--json", action="store_true", help="the contracts as canonical JSON")
    show = rsc_sub.add_parser("show", help="one contract as canonical JSON")
    show.add_argument("rsc_id")
    for sub_parser in (listing, show):
        sub_parser.add_argument("--index", help="the contracts generated for this index (default: the shipped ones)")
    validate = rsc_sub.add_parser("validate", help="check one RSC file")
    validate.add_argument("file", help="the RSC JSON file, or - for standard input")
    validate.add_argument("--json", action="store_true", help="print the validated contract as canonical JSON")
    p.set_defaults(func=cmd_rsc)

    p = sub.add_parser("schema", help="print the JSON Schema of a document type")
    p.add_argument("document", choices=["plan", "rsc", "receipt", "explain", "catalog", "packet", "cite"])
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("replay", help="reproduce a retained run's receipt from its artifacts only (no network)")
    p.add_argument("receipt", help="the receipt JSON of a `race run --retain` run")
    p.add_argument("--retained", required=True, metavar="DIR", help="the retention directory of that run")
    p.add_argument("--json", action="store_true", help="canonical JSON output")
    p.set_defaults(func=cmd_replay)

    add_evidence_commands(sub)
    add_stats_command(sub)

    add_serve_command(sub)

    p = sub.add_parser("demo", help="index the bundled corpus, explain and run the showcase plan")
    p.add_argument("--cache-dir", help="where the demo index lives (default: $RACE_CACHE_DIR or ~/.cache/race)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("completion", help='print a shell completion script: eval "$(race completion bash)"')
    p.add_argument("shell", choices=["bash"])
    p.set_defaults(func=cmd_completion)
    return parser


def cmd_completion(args: argparse.Namespace) -> int:
    from race.cli.completion import bash_completion

    sys.stdout.write(bash_completion(build_parser()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        try:
            return int(args.func(args))
        except BaseExceptionGroup as group:
            raise most_specific(group) from None
    except (InputError, ReplayError) as exc:
        print(f"race: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RaceError as exc:
        print(f"race: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if args.debug:
            raise
        print(f"race: internal error: {type(exc).__name__}: {_one_line(exc)} (--debug shows where)", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    return _one_line_text(str(exc)) or type(exc).__name__


def _one_line_text(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    raise SystemExit(main())
