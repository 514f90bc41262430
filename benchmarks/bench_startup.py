"""CLI start-up: wall and CPU time of cold `race --version`, `race --help`, `race rsc list`,
`race schema plan`, `race plan` and `race run` of a lexical-only plan (no model loaded) and of the
showcase (hybrid, vectors, graph; bundled index already built), against `python -c pass`, in
one run on this machine, each a fresh interpreter as the console script starts it
(``python -m race``), and which of the heavy libraries each command imports (read from one more
run under ``-X importtime``). The targets of issue 23 are checked beside the medians; the load
average is taken before and after, since the machine is shared. Writes
benchmarks/results/startup.{json,md} (not with ``--no-write``).

``--against TREE`` runs the same commands from another checkout (its ``PYTHONPATH`` and its own
fixtures) in the same run, interleaved command by command, so that both see the same load.
Each tree gets its own bundled index and bytecode cache in a temporary folder (built before
anything is timed), so neither tree is written to and both start from compiled modules, as an
installed package does."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RACE = [sys.executable, "-m", "race"]
"""What the ``race`` console script runs (``race.__main__``)."""


def commands(tree: Path) -> dict[str, list[str]]:
    """The commands timed, with the plans of ``tree``'s own fixtures."""
    showcase = str(tree / "fixtures" / "plans" / "showcase.json")
    lexical = str(tree / "fixtures" / "plans" / "cascade_lexical.json")
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "race --version": [*RACE, "--version"],
        "race --help": [*RACE, "--help"],
        "race run --help": [*RACE, "run", "--help"],
        "race serve --help": [*RACE, "serve", "--help"],
        "race rsc list": [*RACE, "rsc", "list"],
        "race schema plan": [*RACE, "schema", "plan"],
        "race plan cascade_lexical.json": [*RACE, "plan", lexical, "--index", "bundled"],
        "race plan showcase.json": [*RACE, "plan", showcase, "--index", "bundled"],
        "race run cascade_lexical.json": [*RACE, "run", lexical, "--index", "bundled"],
        "race run showcase.json": [*RACE, "run", showcase, "--index", "bundled"],
    }


REPEATS = 5
HEAVY = (
    "lancedb",
    "lance",
    "pyarrow",
    "pandas",
    "networkx",
    "tantivy",
    "tokenizers",
    "safetensors",
    "httpx",
    "pydantic",
)
"""Top-level modules whose import a command should pay for only when it needs them."""
TARGETS = {"race --version": 0.15, "race run cascade_lexical.json": 0.6, "race run showcase.json": 1.5}
"""Issue 23's wall-time targets (seconds, on a quiet machine)."""


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=env["PWD"])
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _imported(argv: list[str], env: dict[str, str]) -> list[str]:
    """The ``HEAVY`` modules ``argv`` imports, from the ``-X importtime`` lines on its stderr."""
    traced = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run(
        traced, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True, env=env, cwd=env["PWD"]
    )
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    return sorted(names & set(HEAVY))


def _environment(tree: Path, scratch: Path, label: str) -> dict[str, str]:
    """``tree`` on the path, with its own bundled index and bytecode under ``scratch``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    env["RACE_CACHE_DIR"] = str(scratch / label / "cache")
    env["PYTHONPYCACHEPREFIX"] = str(scratch / label / "pycache")
    env["PWD"] = str(tree)  # the folder every command starts in: ``-m`` puts it first on sys.path
    return env


def _commit(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _rows(
    runs: dict[str, list[tuple[float, float]]], argvs: dict[str, list[str]], env: dict[str, str]
) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for name, argv in argvs.items():
        rows[name] = {
            "wall_s_median": round(statistics.median(r[0] for r in runs[name]), 3),
            "cpu_s_median": round(statistics.median(r[1] for r in runs[name]), 3),
            "cpu_s_min": round(min(r[1] for r in runs[name]), 3),
            "imports": _imported(argv, env),
        }
    base = rows["python -c pass"]["wall_s_median"]
    for name, row in rows.items():
        row["wall_ratio_to_python"] = round(row["wall_s_median"] / base, 1)
        if name in TARGETS:
            row["target_wall_s"] = TARGETS[name]
            row["within_target"] = row["wall_s_median"] <= TARGETS[name]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout to time beside this one")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    trees = {"this": HERE.parent.resolve()}
    if args.against is not None:
        trees["against"] = args.against.resolve()
    with tempfile.TemporaryDirectory(prefix="race-bench-startup-") as tmp:
        envs = {label: _environment(tree, Path(tmp), label) for label, tree in trees.items()}
        argvs = {label: commands(tree) for label, tree in trees.items()}
        for label in trees:
            # The bundled index and the bytecode, made before anything is timed.
            for warm in ("race plan showcase.json", "race run showcase.json", "race run cascade_lexical.json"):
                _once(argvs[label][warm], envs[label])
        load_before = [round(x, 1) for x in os.getloadavg()]
        runs = {label: {name: [] for name in argvs[label]} for label in trees}
        # Round-robin, command by command and tree by tree: a burst of load on the shared
        # machine falls on every command and both trees alike.
        for _ in range(args.repeats):
            for name in argvs["this"]:
                for label in trees:
                    runs[label][name].append(_once(argvs[label][name], envs[label]))
        load = [round(x, 1) for x in os.getloadavg()]
        results = {label: _rows(runs[label], argvs[label], envs[label]) for label in trees}
    out = {
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "load_average_1_5_15_before": load_before,
        "load_average_1_5_15": load,
        "bytecode": "compiled once into a per-tree PYTHONPYCACHEPREFIX before timing",
        "trees": {label: {"path": str(tree), "commit": _commit(tree)} for label, tree in trees.items()},
        "commands": results["this"],
    }
    if "against" in results:
        out["against"] = results["against"]
    lines = _table(out, args.repeats)
    if not args.no_write:
        (HERE / "results" / "startup.json").write_text(json.dumps(out, indent=2) + "\n")
        (HERE / "results" / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _table(out: dict[str, Any], repeats: int) -> list[str]:
    this, against = out["commands"], out.get("against")
    trees = out["trees"]
    if against is None:
        lines = [
            f"| command | wall s (median of {repeats}) | CPU s | wall / `python -c pass` | target (quiet machine) | "
            f"imports of {', '.join(HEAVY)} |",
            "|---|---:|---:|---:|---|---|",
            *(
                f"| `{n}` | {r['wall_s_median']} | {r['cpu_s_median']} | {r['wall_ratio_to_python']} | "
                f"{_target(r)} | {', '.join(r['imports']) or 'none'} |"
                for n, r in this.items()
            ),
        ]
    else:
        a, b = trees["against"]["commit"], trees["this"]["commit"]
        lines = [
            f"| command | wall s before ({a}) | wall s after ({b}) | CPU s before | CPU s after | "
            f"target (quiet machine), after | imports after (of {', '.join(HEAVY)}) |",
            "|---|---:|---:|---:|---:|---|---|",
            *(
                f"| `{n}` | {against[n]['wall_s_median']} | {r['wall_s_median']} | {against[n]['cpu_s_median']} | "
                f"{r['cpu_s_median']} | {_target(r)} | {', '.join(r['imports']) or 'none'} |"
                for n, r in this.items()
            ),
        ]
    before, after = out["load_average_1_5_15_before"], out["load_average_1_5_15"]
    lines.append(
        f"\nMedians of {repeats} runs, interleaved. {out['cpus']} CPUs; load average "
        f"{' / '.join(map(str, before))} (1 / 5 / 15 min) before, {' / '.join(map(str, after))} after. "
        "Modules run from bytecode compiled beforehand. Wall times under load are upper bounds: compare the "
        "ratios and CPU seconds."
    )
    return lines


def _target(row: dict[str, Any]) -> str:
    if "target_wall_s" not in row:
        return ""
    return f"<= {row['target_wall_s']} s: {'met' if row['within_target'] else 'not met'}"


if __name__ == "__main__":
    raise SystemExit(main())
