"""CLI start-up: wall and CPU time of `race --help`, `race rsc list`, `race schema plan`,
`race plan` of a lexical-only plan (no model loaded) and of the showcase (bundled index already
built), against `python -c pass`, in one run on this machine, and which of the heavy backend
libraries each command imports (read from one more run under ``-X importtime``). Writes
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
RACE = [sys.executable, "-m", "race.cli.main"]
SHOWCASE = str(HERE.parent / "fixtures" / "plans" / "showcase.json")
LEXICAL = str(HERE.parent / "fixtures" / "plans" / "cascade_lexical.json")
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "race --help": [*RACE, "--help"],
    "race rsc list": [*RACE, "rsc", "list"],
    "race schema plan": [*RACE, "schema", "plan"],
    "race plan cascade_lexical.json": [*RACE, "plan", LEXICAL],
    "race plan showcase.json": [*RACE, "plan", SHOWCASE],
}
REPEATS = 5
HEAVY = ("lancedb", "pyarrow", "networkx", "tantivy", "tokenizers", "safetensors")
"""Top-level modules whose import a command should pay for only when it needs that backend."""


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
    subprocess.run([*RACE, "plan", SHOWCASE], stdout=subprocess.DEVNULL, check=True)  # builds the bundled index
    rows: dict[str, dict[str, Any]] = {}
    for name, argv in COMMANDS.items():
        runs = [_once(argv) for _ in range(REPEATS)]
        rows[name] = {
            "wall_s_median": round(statistics.median(r[0] for r in runs), 3),
            "cpu_s_median": round(statistics.median(r[1] for r in runs), 3),
            "imports": _imported(argv),
        }
    base = rows["python -c pass"]["wall_s_median"]
    for row in rows.values():
        row["wall_ratio_to_python"] = round(row["wall_s_median"] / base, 1)
    # The machine is shared: the load average says how much the wall times are worth.
    load = [round(x, 1) for x in os.getloadavg()]
    out = {"repeats": REPEATS, "cpus": os.cpu_count(), "load_average_1_5_15": load, "commands": rows}
    (HERE / "results" / "startup.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"| command | wall s (median of {REPEATS}) | CPU s | wall / `python -c pass` | imports of {', '.join(HEAVY)} |",
        "|---|---:|---:|---:|---|",
        *(
            f"| `{n}` | {r['wall_s_median']} | {r['cpu_s_median']} | {r['wall_ratio_to_python']} | "
            f"{', '.join(r['imports']) or 'none'} |"
            for n, r in rows.items()
        ),
    ]
    lines.append(f"\n{os.cpu_count()} CPUs, load average {load[0]} / {load[1]} / {load[2]} (1 / 5 / 15 min) at the end")
    (HERE / "results" / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
