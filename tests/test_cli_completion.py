"""`race completion bash`, sourced into a real bash and asked to complete as bash would:
commands, nested subcommands, fixed choices and each command's options, compared with the
argument parser itself; after a plain word it leaves the reply empty so bash completes files."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from race.cli.main import build_parser, main

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["completion", "bash"]) == 0
    path = tmp_path_factory.mktemp("completion") / "race.bash"
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def complete(script: Path, *words: str) -> list[str]:
    """COMPREPLY for the command line ``race *words`` with the cursor on the last word."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in ("race", *words))
    reply = 'printf "%s\\n" "${COMPREPLY[@]}"'
    probe = f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; _race_complete; {reply}"
    done = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True, check=True, timeout=30)
    return [line for line in done.stdout.splitlines() if line]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _long_options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for a in parser._actions for o in a.option_strings if o.startswith("--"))


def test_every_command_completes(script: Path) -> None:
    commands = _subcommands(build_parser())
    assert sorted(complete(script, "")) == sorted(commands)
    for name in commands:
        assert name in complete(script, name[:2]), name
        assert all(c.startswith(name[:2]) for c in complete(script, name[:2]))
    assert complete(script, "--debug", "ru") == ["run"]


def test_options_and_choices_follow_the_parser(script: Path) -> None:
    commands = _subcommands(build_parser())
    for name, parser in commands.items():
        assert sorted(complete(script, name, "--")) == _long_options(parser), name
    assert complete(script, "run", "--j") == ["--json"]
    assert sorted(complete(script, "rsc", "")) == sorted(_subcommands(commands["rsc"]))
    listing = _subcommands(commands["rsc"])["list"]
    assert sorted(complete(script, "rsc", "list", "--")) == _long_options(listing)
    schema_choices = next(a.choices for a in commands["schema"]._actions if a.dest == "document")
    assert schema_choices is not None
    assert sorted(complete(script, "schema", "")) == sorted(schema_choices)


def test_a_plain_word_is_left_to_file_completion(script: Path) -> None:
    # An empty reply: `complete -o default` then completes file names (a plan, a receipt).
    assert complete(script, "run", "") == []
    assert complete(script, "verify", "rec") == []
    assert "complete -o default -F _race_complete race" in script.read_text()
