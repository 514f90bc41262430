"""`race run` exit status: 0 when every mandatory obligation is satisfied (a cascade or
fallback stage that was not needed counts as met), 3 when the run completed but a mandatory
obligation is partial, unsatisfied or not attempted, with the receipt still printed in full and
one line on stderr naming them; an optional obligation never sets 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from race.cli.main import EXIT_UNMET_MANDATORY, main
from tests.conftest import FIXTURES

PLANS = FIXTURES / "plans"


def _run(capsys: pytest.CaptureFixture[str], plan: Path, index_dir: Path) -> tuple[int, dict[str, object], str]:
    code = main(["run", str(plan), "--index", str(index_dir), "--json"])
    out, err = capsys.readouterr()
    receipt: dict[str, object] = json.loads(out)
    return code, receipt, err


def _statuses(receipt: dict[str, object]) -> dict[str, tuple[str, bool, list[str]]]:
    obligations = receipt["obligations"]
    assert isinstance(obligations, list)
    return {o["id"]: (o["status"], o["mandatory"], sorted(g["kind"] for g in o["gaps"])) for o in obligations}


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        ("exhaustive_vector.json", {"o": ("satisfied", True, [])}),
        ("cascade_lexical.json", {"anywhere": ("not_attempted", True, ["not_needed"])}),
        ("fallback_lexical.json", {"secondary": ("not_attempted", True, ["not_needed"])}),
    ],
)
def test_met_obligations_exit_0(
    capsys: pytest.CaptureFixture[str], index_dir: Path, plan: str, expected: dict[str, tuple[str, bool, list[str]]]
) -> None:
    code, receipt, err = _run(capsys, PLANS / plan, index_dir)
    statuses = _statuses(receipt)
    assert {k: statuses[k] for k in expected} == expected
    assert code == 0 and "mandatory" not in err


@pytest.mark.parametrize(
    ("plan", "unmet"),
    [
        ("postfilter_exhaustive.json", {"o": ("unsatisfied", True, ["postfilter_only_filter"])}),
        ("unsupported_filter.json", {"o1": ("unsatisfied", True, ["unsupported_filter"])}),
        ("node_budget.json", {"wide": ("partial", True, ["resource_limited"])}),
    ],
)
def test_unmet_mandatory_exits_3(
    capsys: pytest.CaptureFixture[str], index_dir: Path, plan: str, unmet: dict[str, tuple[str, bool, list[str]]]
) -> None:
    code, receipt, err = _run(capsys, PLANS / plan, index_dir)
    statuses = _statuses(receipt)
    assert {k: (s, m, sorted(set(g))) for k, (s, m, g) in statuses.items() if k in unmet} == unmet
    assert code == EXIT_UNMET_MANDATORY == 3
    named = ", ".join(f"{k} ({s})" for k, (s, _, _) in unmet.items())
    assert err == f"race: mandatory obligations not satisfied: {named}\n"


def test_optional_obligation_never_exits_3(capsys: pytest.CaptureFixture[str], index_dir: Path, tmp_path: Path) -> None:
    plan = json.loads((PLANS / "postfilter_exhaustive.json").read_text(encoding="utf-8"))
    plan["obligations"][0]["mandatory"] = False
    optional = tmp_path / "optional.json"
    optional.write_text(json.dumps(plan), encoding="utf-8")
    code, receipt, err = _run(capsys, optional, index_dir)
    assert _statuses(receipt)["o"][:2] == ("unsatisfied", False)
    assert code == 0 and err == ""
