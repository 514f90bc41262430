"""Command-line argument types and the parser class: a usage error is bad input like any
other, one line naming the command, exit status 2."""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

EXIT_BAD_INPUT = 2


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, reporting a usage error in one line instead of usage plus error."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(EXIT_BAD_INPUT, f"race: error: {self.prog}: {text} (see `{self.prog} --help`)\n")


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
