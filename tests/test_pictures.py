"""Pictures: ``race plan --format dot|mermaid`` and ``race run --analyze --format html``.

The HTML page is opened in a real headless browser (Debian's chromium; ``make test`` installs it
when /usr/bin/chromium is missing), which must show the tree, the estimates against the actuals
and the gaps, and log no console message. The DOT output is drawn by Graphviz's ``dot`` where
it is installed (``make test`` installs it too).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planner import render_text
from planner.pictures import render_dot, render_mermaid
from race.cli.main import main
from race.engine import Engine
from tests.conftest import FIXTURES

SHOWCASE = FIXTURES / "plans" / "showcase.json"
POSTFILTER = FIXTURES / "plans" / "postfilter_heuristic.json"
CHROMIUM = "/usr/bin/chromium"
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
)


def _browse(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The page's DOM after load, and every console message the browser logged."""
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (`make test` installs Debian's package)")
    done = subprocess.run(
        [CHROMIUM, *BROWSER_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def test_the_console_check_sees_a_console_error(tmp_path: Path) -> None:
    # The check below would catch a page that logs: a control page that does.
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><html><body><p>x</p><script>console.error("race-control")</script></body></html>')
    _, console = _browse(page, tmp_path / "profile")
    assert any("race-control" in line for line in console)


def test_analysis_page_renders_in_a_browser(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(POSTFILTER), "--index", str(index_dir), "--analyze", "--format", "html"]) == 0
    html = capsys.readouterr().out
    # Self-contained: nothing to fetch, no script.
    for outside in ("http:", "https:", "src=", "href=", "@import", "url(", "<script", "<link"):
        assert outside not in html
    page = tmp_path / "analysis.html"
    page.write_text(html)
    dom, console = _browse(page, tmp_path / "profile")
    assert console == []
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "Plan tree: estimated against actual" in text
    assert "lancedb.ann_postfilter@1.1.0" in text
    assert "q-error: latency max" in text
    assert "postfilter_only_filter" in text
    assert "Where the time went" in text and "fusion" in text


def test_dot_marks_chosen_rejected_and_gaps(session_engine: Engine, tmp_path: Path) -> None:
    explain = session_engine.plan_sync(POSTFILTER)
    dot = render_dot(explain)
    alternatives = [a for g in explain.groups for a in g.alternatives]
    assert dot.count('style="bold,filled"') == sum(a.chosen for a in alternatives)
    assert dot.count("style=dashed") == sum(not a.chosen for a in alternatives)
    assert "shape=note" in dot and "gap postfilter_only_filter" in dot
    assert dot == render_dot(session_engine.plan_sync(POSTFILTER))  # deterministic bytes
    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed (`make test` installs Debian's package)")
    for plan in (POSTFILTER, SHOWCASE):
        source = tmp_path / f"{plan.stem}.dot"
        source.write_text(render_dot(session_engine.plan_sync(plan)))
        drawn = subprocess.run(["dot", "-Tsvg", str(source)], capture_output=True, text=True, timeout=600)
        assert drawn.returncode == 0, drawn.stderr
        assert drawn.stderr == "" and "<svg" in drawn.stdout


def test_dot_edges_follow_the_chosen_tree(session_engine: Engine) -> None:
    explain = session_engine.plan_sync(SHOWCASE)
    edges = re.findall(r"^  (G\d+_a\d+) -> (G\d+_a\d+) \[penwidth=2\];$", render_dot(explain), re.M)
    # The showcase's root union reads four groups; the oppose two; the corroborate one.
    assert len(edges) == 7
    assert all(src.startswith(("G1_", "G3_", "G4_")) for src, _ in edges)


def test_mermaid_marks_chosen_rejected_and_gaps(session_engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(POSTFILTER), "--format", "mermaid"]) == 0
    mermaid = capsys.readouterr().out
    explain = session_engine.plan_sync(POSTFILTER)
    assert mermaid == render_mermaid(explain)
    assert mermaid.startswith("flowchart TB\n")
    chosen = re.search(r"^  class (\S+) chosen$", mermaid, re.M)
    rejected = re.search(r"^  class (\S+) rejected$", mermaid, re.M)
    assert chosen is not None and rejected is not None
    alternatives = [a for g in explain.groups for a in g.alternatives]
    assert len(chosen.group(1).split(",")) == sum(a.chosen for a in alternatives)
    assert len(rejected.group(1).split(",")) == sum(not a.chosen for a in alternatives)
    assert "gap postfilter_only_filter" in mermaid and "class G1_gap0 gap" in mermaid
    # The text explain is unchanged by the pictures' existence.
    assert "physical:" in render_text(explain)
