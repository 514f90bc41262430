"""The index commands of ``race``: ``index`` (build every backend's index of a corpus, or
infer its schema) and ``calibrate`` (measure the approximate contracts' recall on the index);
``race.cli.main`` registers them with ``add_index_commands``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from race.cli.arguments import canonical_pretty
from rsc import InputError


def cmd_calibrate(args: argparse.Namespace) -> int:
    from race.indexing.calibration import calibrate_index, calibration_table
    from race.indexing.indexing import read_manifest

    index = Path(args.index)
    read_manifest(index)  # a missing or foreign directory is bad input, named
    if args.k < 1:
        raise InputError(f"must be at least 1, got {args.k}", where="--k")
    print(calibration_table(calibrate_index(index, k=args.k, seed=args.seed)))
    return 0


def cmd_infer_schema(corpus: Path) -> int:
    from backends.ingest.corpus import infer_schema
    from backends.ingest.schema import schema_document, schema_file_for, schema_path

    existing = schema_path(corpus) if corpus.exists() else None
    if existing is not None:
        raise InputError("the corpus already has a schema; edit it, or move it away to infer anew", where=str(existing))
    schema, unfit = infer_schema(corpus)
    target = schema_file_for(corpus)
    target.write_text(schema_document(schema), encoding="utf-8")
    for name, spec in schema.fields.items():
        roles = f" roles={','.join(r.value for r in spec.roles)}" if spec.roles else ""
        print(f"field {name}: {spec.type.value}{roles}")
    for name, rel in schema.relations.items():
        print(f"relation {name}: {rel.role.value}")
    for name, problem in unfit.items():
        if name == "doc_id":  # the loader's own, never overwritten
            print(f"ignored {name}: not a field ({problem})")
        else:
            print(f"stored {name}: not a field ({problem}); kept in chunk metadata, not filterable")
    print(f"race: wrote {target}; review it, then run `race index {corpus} --out DIR`", file=sys.stderr)
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    if args.infer_schema:
        return cmd_infer_schema(Path(args.corpus))
    if not args.out:
        raise InputError("--out DIR is required (or --infer-schema to write a schema for review)", where="race index")
    from tqdm import tqdm

    from race.indexing.indexing import build_index, read_ingest

    bars: dict[str, tqdm] = {}
    files = (tuple(args.include or ()), tuple(args.exclude or ()))

    def report(backend: str, done: int, total: int) -> None:
        bar = bars.get(backend)
        if bar is None:
            # Progress is drawn only for a person watching a terminal, never into a log or pipe.
            bar = bars[backend] = tqdm(
                total=total, desc=f"index {backend}", unit="chunk", file=sys.stderr, disable=not sys.stderr.isatty()
            )
        bar.update(done - bar.n)

    try:
        if args.update:
            if args.ray:
                raise InputError("--update embeds in this process; leave out --ray", where="--update")
            from race.indexing.update import update_index

            summary = update_index(
                Path(args.corpus),
                Path(args.out),
                report,
                vectors=not args.no_vectors,
                notice=lambda text: print(f"race: notice: {text}", file=sys.stderr),
                files=files,
            )
            generations = summary.generations
            print(f"race: {update_line(summary)}", file=sys.stderr)
        elif args.ray:
            if args.include or args.exclude:
                raise InputError("--include and --exclude are not read with --ray yet; leave them out", where="--ray")
            from race.indexing.distributed import build_index_on_ray

            corpus, out = Path(args.corpus), Path(args.out)
            generations = build_index_on_ray(corpus, out, report, address=args.ray, workers=args.workers)
        else:
            generations = build_index(
                Path(args.corpus),
                Path(args.out),
                report,
                vectors=not args.no_vectors,
                notice=lambda text: print(f"race: notice: {text}", file=sys.stderr),
                files=files,
            )
    finally:
        for bar in bars.values():
            bar.close()
    ingest = read_ingest(Path(args.out))
    if ingest is not None:
        print(f"race: {ingest.summary()}", file=sys.stderr)
    if args.json:
        sys.stdout.write(canonical_pretty(dict(sorted(generations.items()))) + "\n")
        return 0
    for backend, generation in sorted(generations.items()):
        print(f"{backend}\t{generation}")
    return 0


def update_line(summary: Any) -> str:
    """One line saying what ``--update`` did, with the count of documents re-embedded."""
    fresh = len(summary.added) + len(summary.changed)
    done = "rebuilt" if summary.rebuilt is not None else "updated"
    counts = (
        f"{done}: {len(summary.added)} added, {len(summary.changed)} changed, {len(summary.removed)} removed, "
        f"{summary.unchanged} unchanged"
    )
    if not summary.vectors:
        return f"{counts}; re-indexed {fresh} document{'s' * (fresh != 1)}, no vector index (nothing embedded)"
    return (
        f"{counts}; re-embedded {fresh} document{'s' * (fresh != 1)} ({summary.chunks_embedded} chunks, "
        f"{summary.texts_embedded} distinct texts embedded)"
    )


def add_index_commands(sub: Any) -> None:
    p = sub.add_parser("index", help="build the tantivy, LanceDB and graph indexes of a corpus")
    p.add_argument(
        "corpus", help="a folder of Markdown, text, reStructuredText and HTML files (and edges.jsonl), or a JSONL file"
    )
    p.add_argument("--out", help="index directory to create or replace")
    p.add_argument(
        "--infer-schema",
        action="store_true",
        help="write a schema.json inferred from the corpus beside it, for review (builds nothing)",
    )
    p.add_argument(
        "--no-vectors",
        action="store_true",
        help="a lexical-only index (tantivy and graph), no embedding model needed; also the default without one",
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="bring the index at --out to the corpus: re-index only added, changed and removed documents",
    )
    p.add_argument(
        "--include", action="append", metavar="GLOB", help="index only files whose path or name matches (repeatable)"
    )
    p.add_argument(
        "--exclude", action="append", metavar="GLOB", help="skip files whose path or name matches (repeatable)"
    )
    p.add_argument("--json", action="store_true", help="print the generations as JSON")
    p.add_argument(
        "--ray", nargs="?", const="local", metavar="ADDRESS", help="embed on Ray ('local', the default, or an address)"
    )
    p.add_argument("--workers", type=int, default=0, metavar="N", help="Ray embedding actors (default: one per CPU)")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("calibrate", help="measure the recall of an index's approximate contracts on that index")
    p.add_argument("index", help="an index directory built by `race index`")
    p.add_argument("--k", type=int, default=10, help="recall@k (default 10)")
    p.add_argument("--seed", type=int, default=7, help="seed of the sampled queries (default 7)")
    p.set_defaults(func=cmd_calibrate)
