"""A known-item query set over text nobody on the project wrote: the docstrings of the Python
standard library installed on this machine, and of installed third-party packages (numpy by default).

Each document is one documented function, class or method (``title``: its qualified name,
``text``: its docstring *without* the first line); its query is that first line, the summary
the author wrote of it. The judgment is objective: the query's one relevant document is the
one it was cut from. Summaries that repeat (``Return self==value.``) and documents whose rest is
shorter than ``MIN_BODY`` characters are left out; the set is sorted and capped, so it is the
same on every run of the same Python.

    .venv/bin/python -m benchmarks.build_stdlib_eval --out /tmp/stdlib-eval [--limit 2000]

writes ``docs.jsonl`` (+ ``docs.schema.json``), ``queries.jsonl`` and ``qrels.trec``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import pkgutil
import re
import sys
import warnings
from collections import Counter
from pathlib import Path

MIN_BODY = 150
SKIP = re.compile(r"^(test|idlelib|tkinter|turtle|lib2to3|ensurepip|venv|__|_)")


def _modules(extra: list[str]) -> list[str]:
    """Every public stdlib module (and of ``extra`` packages), and the public modules of its packages."""
    names = set()
    wanted = sys.stdlib_module_names | set(extra)
    for top in sorted((m for m in pkgutil.iter_modules() if m.name in wanted), key=lambda m: m.name):
        if SKIP.match(top.name) or top.name in {"antigravity", "this"}:
            continue
        names.add(top.name)
        if top.ispkg:
            try:
                package = importlib.import_module(top.name)
            except Exception:
                continue
            for sub in pkgutil.walk_packages(package.__path__, prefix=f"{top.name}.", onerror=lambda _: None):
                if not any(part.startswith("_") or part in {"test", "tests"} for part in sub.name.split(".")):
                    names.add(sub.name)
    return sorted(names)


def _members(module: object, prefix: str) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for name, value in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        if inspect.isclass(value) or inspect.isroutine(value):
            if getattr(value, "__module__", None) not in (prefix, None):
                continue
            out.append((f"{prefix}.{name}", value))
            if inspect.isclass(value):
                for attr, member in sorted(vars(value).items()):
                    if not attr.startswith("_") and inspect.isroutine(member):
                        out.append((f"{prefix}.{name}.{attr}", member))
    return out


def collect(extra: list[str]) -> list[tuple[str, str, str]]:
    """(qualified name, summary line, rest) of every documented routine and class."""
    found = []
    warnings.simplefilter("ignore")
    for modname in _modules(extra):
        try:
            module = importlib.import_module(modname)
        except Exception:  # a module this platform lacks (winreg, msvcrt, …)
            continue
        for qualified, obj in _members(module, modname):
            doc = inspect.getdoc(obj)
            if not doc:
                continue
            lines = doc.strip().splitlines() or [""]
            summary = " ".join(lines[0].split())
            body = "\n".join(lines[1:]).strip()
            if len(summary) >= 12 and len(body) >= MIN_BODY:
                found.append((qualified, summary, body))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument(
        "--max-chars", type=int, default=0, help="cut each document's text at the last line end before N characters"
    )
    parser.add_argument(
        "--packages", default="numpy", help="installed packages read beside the stdlib (space-separated)"
    )
    args = parser.parse_args(argv)
    found = collect(args.packages.split())
    repeats = Counter(s.lower() for _, s, _ in found)
    bodies = Counter(b for _, _, b in found)
    kept = [(q, s, b) for q, s, b in found if repeats[s.lower()] == 1 and bodies[b] == 1]
    # A stable spread over the modules: ordered by a hash of the name, then capped.
    kept.sort(key=lambda t: hashlib.sha256(t[0].encode()).hexdigest())
    kept = sorted(kept[: args.limit])
    args.out.mkdir(parents=True, exist_ok=True)
    if args.max_chars:
        kept = [
            (q, s, b if len(b) <= args.max_chars else b[: b.rfind("\n", 0, args.max_chars) + 1 or args.max_chars])
            for q, s, b in kept
        ]
    with (args.out / "docs.jsonl").open("w", encoding="utf-8") as docs:
        for qualified, _, body in kept:
            docs.write(json.dumps({"id": qualified, "title": qualified, "text": body}, ensure_ascii=False) + "\n")
    (args.out / "docs.schema.json").write_text(json.dumps({"schema_version": "race.schema/1", "extra": "error"}))
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as queries:
        for n, (_, summary, _) in enumerate(kept):
            queries.write(json.dumps({"id": f"s{n:05d}", "text": summary, "category": "known-item"}) + "\n")
    (args.out / "qrels.trec").write_text("".join(f"s{n:05d} 0 {q} 1\n" for n, (q, _, _) in enumerate(kept)))
    size = (args.out / "docs.jsonl").stat().st_size
    print(f"{len(kept)} documents and queries ({size / 1e6:.1f} MB) from {len(found)} docstrings -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
