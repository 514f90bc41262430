"""The documentation site builds with ``mkdocs build --strict`` (a broken link or anchor in
``docs/`` fails it), and the README stays a front door: short, and every relative link in it
names a file of the repository and, into a page, an anchor that page has."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING_ID = re.compile(r"^#{1,6} .*\{#([\w-]+)\}\s*$")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict"]
    result = subprocess.run(
        [*command, "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "invariants" / "index.html").is_file()


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines; move detail into docs/"


def _anchors(page: Path) -> set[str]:
    """The explicit heading ids of a page (``## Title {#id}``) and the ids of its plain headings."""
    found: set[str] = set()
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        explicit = HEADING_ID.match(line)
        if explicit:
            found.add(explicit.group(1))
        else:
            text = re.sub(r"[^\w\s-]", "", line.lstrip("#").strip().lower())
            found.add(re.sub(r"[\s]+", "-", text).strip("-"))
    return found


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = LINK.findall(README.read_text(encoding="utf-8"))
    relative = [link for link in links if not re.match(r"^[a-z]+:", link)]
    assert relative, "the README links into the documentation"
    for link in relative:
        path, _, anchor = link.partition("#")
        target = (ROOT / path).resolve()
        assert target.is_file(), f"README.md links to {link!r}, which is not a file of the repository"
        if anchor:
            assert anchor in _anchors(target), f"README.md links to {link!r}: {path} has no anchor {anchor!r}"
