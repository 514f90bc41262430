"""Run a command (by default the test suite) beside N CPU-bound burner processes.

    python -m benchmarks.busy                      # 6 burners, `python -m pytest -q`
    python -m benchmarks.busy -n 6 -- python -m pytest -q tests/faults

The burners are pure-Python busy loops in their own process group; they are stopped
when the command ends, fails or is interrupted (Ctrl-C). The command's output passes
through unchanged and is also kept in ``--log``; its wall time, exit code, the load
average during the run and pytest's summary line go to
benchmarks/results/busy_suite.json and .md. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent

_BURN = "while True: pass"
_SUMMARY = re.compile(r"^=*\s*(\d+ (failed|passed|error|errors|skipped|deselected|xfailed|xpassed)\b.*?)\s*=*$")


def _start_burners(n: int) -> subprocess.Popen[bytes] | None:
    """One parent shell in a new session that starts n busy loops; the group dies together."""
    if n <= 0:
        return None
    script = "\n".join(f"{shlex.quote(sys.executable)} -c {shlex.quote(_BURN)} &" for _ in range(n)) + "\nwait\n"
    return subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _summary_line(lines: list[str]) -> str:
    for line in reversed(lines):
        m = _SUMMARY.match(line.strip())
        if m:
            return m.group(1)
    return ""


def _failed(lines: list[str]) -> list[str]:
    """The ids of pytest's short summary ``FAILED``/``ERROR`` lines."""
    return [line.split(" - ")[0] for line in lines if re.match(r"(FAILED|ERROR) \S+::", line)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--burners", type=int, default=6, help="CPU-bound processes beside the command")
    parser.add_argument("--log", type=Path, default=RESULTS / "busy_suite.log", help="full output of the command")
    parser.add_argument("--out", type=Path, default=RESULTS / "busy_suite", help="stem of the .json and .md written")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run (after --)")
    args = parser.parse_args(argv)
    command = [c for c in args.command if c != "--"] or [str(ROOT / ".venv/bin/python"), "-m", "pytest", "-q"]

    loads: list[float] = []
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(5.0):
            loads.append(os.getloadavg()[0])

    burners = _start_burners(args.burners)
    sampler = threading.Thread(target=sample, daemon=True)
    lines: list[str] = []
    rc = -1
    start = time.monotonic()
    load_before = os.getloadavg()
    try:
        time.sleep(2.0 if burners else 0.0)  # let the burners reach full speed
        start = time.monotonic()
        sampler.start()
        args.log.parent.mkdir(parents=True, exist_ok=True)
        with args.log.open("w") as log:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                    log.write(line)
                    log.flush()
                    lines.append(line.rstrip("\n"))
                rc = proc.wait()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
    finally:
        wall_s = time.monotonic() - start
        stop_sampling.set()
        _stop(burners)

    load_end = os.getloadavg()
    result = {
        "command": command,
        "burners": args.burners,
        "cpus": os.cpu_count(),
        "exit_code": rc,
        "wall_s": round(wall_s, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_at_end": [round(x, 2) for x in load_end],
        "load_1m_mean": round(sum(loads) / len(loads), 2) if loads else None,
        "load_1m_max": round(max(loads), 2) if loads else None,
        "summary": _summary_line(lines),
        "failed": _failed(lines),
        "log": str(args.log.relative_to(ROOT)) if args.log.is_relative_to(ROOT) else str(args.log),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out_json = args.out.with_suffix(".json")
    out_json.write_text(json.dumps(result, indent=2) + "\n")
    md = [
        "# Test suite beside CPU-bound processes",
        "",
        f"`{' '.join(command)}` with {args.burners} busy-loop processes on {os.cpu_count()} cores "
        "(`python -m benchmarks.busy`).",
        "",
        "| exit code | wall time | 1-min load (mean / max) | summary |",
        "|---|---|---|---|",
        f"| {rc} | {wall_s / 60:.1f} min ({wall_s:.0f} s) | {result['load_1m_mean']} / {result['load_1m_max']} "
        f"| {result['summary']} |",
        "",
        f"Finished {result['finished_utc']}.",
        "",
        *([f"- {line}" for line in result["failed"]] + [""] if result["failed"] else []),
    ]
    args.out.with_suffix(".md").write_text("\n".join(md))
    print(f"busy: exit {rc}, {wall_s:.0f} s, load mean {result['load_1m_mean']} max {result['load_1m_max']}")
    print(f"busy: {result['summary']}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
