"""Command-line argument types and the parser class (a usage error is bad input like any
other, one line naming the command, exit status 2), and the engine the arguments name."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from rsc import InputError

EXIT_BAD_INPUT = 2
INDEX_ENV = "RACE_INDEX"
"""The environment variable naming the index when ``--index`` is not given."""
BUNDLED = "bundled"
"""The index name that asks for the bundled demo corpus (indexed on first use)."""
INDEX_HELP = "index directory, or `bundled` for the demo corpus (default: $RACE_INDEX; one of them is needed)"


def canonical_pretty(value: Any) -> str:
    """``rsc.canonical_pretty``, imported when a command prints (it needs pydantic, which
    building the parser and ``race --help`` do not)."""
    from rsc.canonical import canonical_pretty as pretty

    return pretty(value)


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, reporting a usage error in one line instead of usage plus error: one
    ``race: error:`` prefix, the subcommand named, and the closest command or flag to a misspelt
    one (did you mean)."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        choice = _INVALID_CHOICE.search(text)
        if choice is not None:
            from rsc.suggest import did_you_mean

            hint = did_you_mean(choice["word"], _CHOICE.findall(choice["choices"]))
            text = f"{text[: choice.start()]}invalid choice: {choice['word']!r}{hint}; choose from {choice['choices']}"
        command = self.prog.removeprefix("race").strip()
        place = f"{command}: " if command else ""
        self.exit(EXIT_BAD_INPUT, f"race: error: {place}{text} (see `{self.prog} --help`)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.prog == "race":
            # argparse reports a subcommand's unknown flag from the top parser: name the subcommand
            # and the closest of its own flags.
            from rsc.suggest import did_you_mean

            sub = self._subcommand(getattr(parsed, "command", None))
            flags = [flag for action in sub._actions for flag in action.option_strings] if sub else []
            hint = did_you_mean(extras[0], flags) if extras[0].startswith("-") else ""
            (sub or self).error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed, extras

    def _subcommand(self, name: str | None) -> argparse.ArgumentParser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                found: argparse.ArgumentParser = action.choices[name]
                return found
        return None


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)$")
_CHOICE = re.compile(r"'([^']*)'")


def seconds(text: str) -> float:
    """A positive, finite number of seconds (``nan``, ``inf``, 0 and negatives are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return value


def port(text: str) -> int:
    """A TCP port, 0 (an ephemeral one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-65535)")
    return value


def index_named(value: str | None) -> Path:
    """The index a command reads: ``--index``, else ``$RACE_INDEX``; ``bundled`` is the demo
    corpus. There is no implicit one: a forgotten flag is bad input, never the demo's answers."""
    name = value or os.environ.get(INDEX_ENV) or ""
    if not name:
        raise InputError(
            f"which index? pass --index DIR (or set {INDEX_ENV}); `--index {BUNDLED}` asks for the demo corpus",
            where="--index",
        )
    if name == BUNDLED:
        from race.indexing.bundled import ensure_bundled_index

        return ensure_bundled_index(quiet=False)
    return Path(name)


def open_engine(args: argparse.Namespace) -> object:
    """The engine a command's arguments name: a catalog, or an index (``index_named``) with its
    remotes, Milvus instances and statistics; with ``--record-stats``, where runs append theirs."""
    engine = _open_engine(args)
    record = getattr(args, "record_stats", None)
    if record:
        path = Path(record)
        if not path.parent.is_dir() or path.is_dir():
            raise InputError("not a file in an existing folder", where="--record-stats")
        setattr(engine, "record_stats", path)  # noqa: B010 - the engine's type is imported lazily
    return engine


def _open_engine(args: argparse.Namespace) -> object:
    from race.engine import Engine, load_statistics

    stats = load_statistics(Path(args.stats)) if getattr(args, "stats", None) else None
    remotes = tuple(getattr(args, "remote", None) or ())
    if getattr(args, "catalog", None):
        if args.index or remotes or getattr(args, "milvus", None):
            raise InputError("a catalog names every instance: leave out --index, --remote, --milvus", where="--catalog")
        early_stop = not getattr(args, "no_early_stop", False)
        return Engine.from_catalog(Path(args.catalog), statistics=stats, early_stop=early_stop)
    index = index_named(args.index)
    return Engine.open(
        index,
        statistics=stats,
        remotes=remotes,
        remote_timeout=args.remote_timeout,
        milvus=tuple(Path(m) for m in getattr(args, "milvus", None) or ()),
        early_stop=not getattr(args, "no_early_stop", False),
    )
