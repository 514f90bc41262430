"""The ``race`` console script and ``python -m race``: ``race --version`` answers from the
version string alone; every other command loads the command line (``race.cli.main``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from race.version import __version__


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        sys.stdout.write(f"race {__version__}\n")
        return 0
    from race.cli.main import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
