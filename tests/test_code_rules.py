"""Rules for library code that no linter checks: no object identity, modules readable in one
sitting, one module per physical operator. Import layering is tests/test_import_contracts.py's."""

from __future__ import annotations

import ast

from tests.conftest import ROOT


def test_no_object_identity_in_library_code() -> None:
    """Plans, fingerprints and receipts never depend on id()."""
    offenders = []
    for package in ("rsc", "planner", "backends", "race"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "id":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_modules_stay_readable_in_one_sitting() -> None:
    """No module grows past about 400 lines: split along the design instead."""
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for package in ("rsc", "planner", "backends", "race")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > 400
    ]
    assert long == []


def test_operator_dispatch_is_a_table_over_every_operator_kind() -> None:
    from race.run.operators import OPERATORS
    from rsc import OperatorKind

    assert set(OPERATORS) == set(OperatorKind)
    for kind in OperatorKind:
        assert (ROOT / "race" / "run" / "operators" / f"{kind.value}.py").exists()
