"""The fault matrix (tests/faults/matrix.py): every case returns a receipt within the plan
deadline + 100 ms and names its fault where it happened; no loss is silent (docs/invariants.md: I3, I5,
I7, I17 and "Malformed answers")."""

from __future__ import annotations

import anyio
import pytest

from rsc import OperatorKind
from tests.faults.matrix import MATRIX, Case, CaseResult, Runner, counts, markdown, operators_above
from tests.remote.conftest import Server

BY_ID = {case.id: case for case in MATRIX}

DETERMINISTIC = (
    "operators_lexical:stall-incident@tantivy:raise_task(KeyError)",
    "showcase:memory-reports@lancedb:raise_task(BackendUnavailable)",
    "showcase:python-deps@graph:raise_thread(ValueError)",
    "operators_lexical:stall-official@tantivy:out_of_filter",
    "showcase:cve-id@tantivy:duplicate_hits",
    "early_stop_union:official-fix@lancedb:nth_call(2,negative_score)",
    "remote_operators:remote-stall@remote:truncated_custody",
    "corpus2/tickets_operators:lock-waits@tantivy:raise_task(KeyError)",
    "corpus2/tickets_operators:blockers@graph:duplicate_hits",
)


def _result(runner: Runner, case: Case, request: pytest.FixtureRequest) -> CaseResult:
    if case.needs_server and runner.remote_url is None:
        server: Server = request.getfixturevalue("server")
        runner.remote_url = server.url
    return runner.result(case)


def test_the_matrix_reaches_every_operator_kind_and_backend() -> None:
    reached = set().union(*(operators_above(case) for case in MATRIX))
    assert reached == {kind.value for kind in OperatorKind}
    assert {case.backend for case in MATRIX} == {"tantivy", "lancedb", "graph", "remote"}
    for backend in ("tantivy", "lancedb", "graph", "remote"):
        kinds = {case.fault.base.kind for case in MATRIX if case.backend == backend}
        assert {"raise_task", "raise_thread", "hang_async", "hang_thread", "late_answer"} <= kinds, backend
        assert {"nan_score", "negative_score", "duplicate_hits", "truncated_custody"} <= kinds, backend


def test_the_matrix_runs_over_both_fixture_corpora() -> None:
    """The second corpus (another schema, generated contracts) has cases on every local backend."""
    second = [case for case in MATRIX if case.corpus == "corpus2"]
    assert {case.backend for case in second} == {"tantivy", "lancedb", "graph"}
    assert {case.fault.base.kind for case in second} >= {"raise_task", "raise_thread", "out_of_filter", "late_answer"}


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in MATRIX])
def test_fault_is_contained_and_named(case: Case, runner: Runner, request: pytest.FixtureRequest) -> None:
    result = _result(runner, case, request)
    if result.skipped:
        pytest.skip(result.skipped)
    assert result.violations == [], "\n".join(f"[{tag}] {text}" for tag, text in result.violations)


@pytest.mark.parametrize("case_id", DETERMINISTIC)
def test_the_same_fault_gives_the_same_bytes(case_id: str, runner: Runner, request: pytest.FixtureRequest) -> None:
    """I5 under faults: two runs of one case, each on fresh engines, normalize to the same bytes."""
    case = BY_ID[case_id]
    _result(runner, case, request)  # connects the server if the case needs one
    one, two = anyio.run(runner.fresh, case), anyio.run(runner.fresh, case)
    assert one.escaped is None and two.escaped is None, (one.escaped, two.escaped)
    assert one.receipt is not None and two.receipt is not None
    assert one.receipt.normalized_bytes() == two.receipt.normalized_bytes()


def test_no_silent_loss_no_overrun_no_missing_receipt(runner: Runner, request: pytest.FixtureRequest) -> None:
    results = [_result(runner, case, request) for case in MATRIX]
    table = counts(results)
    report = markdown(results)
    assert table["faults_injected"] == table["cases"] - table["skipped"], report
    assert table["silent_losses"] == 0, report
    assert table["overruns"] == 0, report
    assert table["hangs"] == 0, report
    assert table["no_receipt"] == 0, report
