"""A feature whose optional library is missing is one line naming the exact install command,
exit 2, and nothing written: ``race eval`` without ``[eval]``, ``to_pandas`` without ``[pandas]``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from race.extras import ExtraMissing, require
from tests.conftest import FIXTURES

EVAL = FIXTURES / "eval" / "kestrel"

# The library made unimportable the way a missing install is: ``import`` raises ImportError.
_WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from race.__main__ import main
raise SystemExit(main(sys.argv[2:]))
"""


def _race_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _WITHOUT, modules, *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("missing", "extra"), [("ir_measures", "eval"), ("matplotlib", "eval")], ids=["ir-measures", "matplotlib"]
)
def test_race_eval_without_its_extra_is_one_line_and_exit_2(
    index_dir: Path, tmp_path: Path, missing: str, extra: str
) -> None:
    out = tmp_path / "out"
    done = _race_without(
        missing,
        "eval",
        str(EVAL / "queries.jsonl"),
        str(EVAL / "qrels.jsonl"),
        "--index",
        str(index_dir),
        "--out",
        str(out),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'race-engine[{extra}]'" in lines[0], lines
    assert not out.exists()


def test_to_pandas_without_pandas_names_its_extra() -> None:
    saved = sys.modules.get("pandas")
    sys.modules["pandas"] = None  # type: ignore[assignment]
    try:
        with pytest.raises(ExtraMissing, match=r"pip install 'race-engine\[pandas\]'"):
            require("pandas", feature="Receipt.to_pandas()", where="to_pandas")
    finally:
        if saved is not None:
            sys.modules["pandas"] = saved
        else:
            del sys.modules["pandas"]
