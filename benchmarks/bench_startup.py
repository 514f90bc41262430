"""CLI start-up: wall and CPU time of cold `race --version`, `race --help`, `race rsc list`,
`race schema plan`, `race plan` and `race run` of a lexical-only plan (no model loaded) and of the
showcase (hybrid, vectors, graph; bundled index already built), against `python -c pass`, in
one run on this machine, each a fresh interpreter as the console script starts it
(``python -m race``), and which of the heavy libraries each command imports (read from one more
run under ``-X importtime``). The targets of issue 23 are checked beside the medians; the load
average is taken before and after, since the machine is shared. Writes
benchmarks/results/startup.{json,md}."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RACE = [sys.executable, "-m", "race"]
"""What the ``race`` console script runs (``race.__main__``)."""
SHOWCASE = str(HERE.parent / "fixtures" / "plans" / "showcase.json")
LEXICAL = str(HERE.parent / "fixtures" / "plans" / "cascade_lexical.json")
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "race --version": [*RACE, "--version"],
    "race --help": [*RACE, "--help"],
    "race run --help": [*RACE, "run", "--help"],
    "race serve --help": [*RACE, "serve", "--help"],
    "race rsc list": [*RACE, "rsc", "list"],
    "race schema plan": [*RACE, "schema", "plan"],
    "race plan cascade_lexical.json": [*RACE, "plan", LEXICAL, "--index", "bundled"],
    "race plan showcase.json": [*RACE, "plan", SHOWCASE, "--index", "bundled"],
    "race run cascade_lexical.json": [*RACE, "run", LEXICAL, "--index", "bundled"],
    "race run showcase.json": [*RACE, "run", SHOWCASE, "--index", "bundled"],
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


def _once(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _imported(argv: list[str]) -> list[str]:
    """The ``HEAVY`` modules ``argv`` imports, from the ``-X importtime`` lines on its stderr."""
    traced = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run(traced, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    return sorted(names & set(HEAVY))


def main() -> int:
    # The bundled index, built before anything is timed.
    subprocess.run([*RACE, "plan", SHOWCASE, "--index", "bundled"], stdout=subprocess.DEVNULL, check=True)
    load_before = [round(x, 1) for x in os.getloadavg()]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    # Round-robin: a burst of load on the shared machine falls on every command alike.
    for _ in range(REPEATS):
        for name, argv in COMMANDS.items():
            runs[name].append(_once(argv))
    load = [round(x, 1) for x in os.getloadavg()]
    rows: dict[str, dict[str, Any]] = {}
    for name, argv in COMMANDS.items():
        rows[name] = {
            "wall_s_median": round(statistics.median(r[0] for r in runs[name]), 3),
            "cpu_s_median": round(statistics.median(r[1] for r in runs[name]), 3),
            "imports": _imported(argv),
        }
    base = rows["python -c pass"]["wall_s_median"]
    for name, row in rows.items():
        row["wall_ratio_to_python"] = round(row["wall_s_median"] / base, 1)
        if name in TARGETS:
            row["target_wall_s"] = TARGETS[name]
            row["within_target"] = row["wall_s_median"] <= TARGETS[name]
    # The machine is shared: the load average says how much the wall times are worth.
    out = {
        "repeats": REPEATS,
        "cpus": os.cpu_count(),
        "load_average_1_5_15_before": load_before,
        "load_average_1_5_15": load,
        "commands": rows,
    }
    (HERE / "results" / "startup.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"| command | wall s (median of {REPEATS}) | CPU s | wall / `python -c pass` | target (quiet machine) | "
        f"imports of {', '.join(HEAVY)} |",
        "|---|---:|---:|---:|---|---|",
        *(
            f"| `{n}` | {r['wall_s_median']} | {r['cpu_s_median']} | {r['wall_ratio_to_python']} | "
            f"{_target(r)} | {', '.join(r['imports']) or 'none'} |"
            for n, r in rows.items()
        ),
    ]
    lines.append(
        f"\n{os.cpu_count()} CPUs; load average {' / '.join(map(str, load_before))} (1 / 5 / 15 min) "
        f"before, {' / '.join(map(str, load))} after. Wall times under load are upper bounds: compare the "
        "ratios and CPU seconds."
    )
    (HERE / "results" / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _target(row: dict[str, Any]) -> str:
    if "target_wall_s" not in row:
        return ""
    return f"<= {row['target_wall_s']} s: {'met' if row['within_target'] else 'not met'}"


if __name__ == "__main__":
    raise SystemExit(main())
