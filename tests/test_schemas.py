"""The JSON Schemas carry $schema and $id, the published copies under docs/schemas/ are
current, and the fixtures validate against them (plans, shipped contracts, golden explains and
receipts, a live receipt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from race.engine import Engine
from race.schemas import DOCUMENTS, JSON_SCHEMA_DIALECT, document_schema, schema_text
from tests.conftest import FIXTURES, ROOT

jsonschema = pytest.importorskip("jsonschema")

PUBLISHED = ROOT / "docs" / "schemas"


@pytest.mark.parametrize("document", DOCUMENTS)
def test_published_schema_is_current(document: str) -> None:
    schema = document_schema(document)
    assert schema["$schema"] == JSON_SCHEMA_DIALECT
    assert schema["$id"].startswith("urn:race:race.")
    jsonschema.Draft202012Validator.check_schema(schema)
    published = (PUBLISHED / f"{document}.schema.json").read_text()
    assert published == schema_text(document), "regenerate with: python -m race.schemas docs/schemas"


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_property_is_described(document: str) -> None:
    """Each property's description is its model attribute's docstring (or Field description)."""
    schema = document_schema(document)
    records = {"(root)": schema, **schema.get("$defs", {})}
    bare = [
        f"{name}.{field}"
        for name, node in records.items()
        for field, spec in node.get("properties", {}).items()
        if not spec.get("description", "").strip()
    ]
    assert bare == [], f"{document}: properties without a docstring: {', '.join(bare)}"


def test_descriptions_are_the_docstrings() -> None:
    from race.schemas import attribute_docs
    from rsc.answers import Custody

    schema = document_schema("receipt")
    custody = schema["$defs"]["Custody"]["properties"]
    assert custody["source_hash"]["description"] == attribute_docs(Custody)["source_hash"]
    assert "``" not in json.dumps(schema) and "`sha256:<hex>`" in custody["source_hash"]["description"]
    # Inherited fields keep their base's docstring (operators share ``id`` and ``inputs``).
    plan = document_schema("plan")["$defs"]
    assert plan["UnionOp"]["properties"]["id"]["description"] == plan["CascadeOp"]["properties"]["id"]["description"]


def _validator(document: str) -> Any:
    return jsonschema.Draft202012Validator(json.loads((PUBLISHED / f"{document}.schema.json").read_text()))


PLANS = sorted(p for p in (FIXTURES / "plans").rglob("*.json") if "schema_version" in p.read_text())
RSCS = sorted((ROOT / "backends").glob("*/rsc/*.json"))
EXPLAINS = sorted((FIXTURES / "golden").glob("*.explain.json"))
RECEIPTS = sorted((FIXTURES / "golden" / "receipts").glob("*.receipt.json"))


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_fixture_plans_validate(path: Path) -> None:
    _validator("plan").validate(json.loads(path.read_text()))


@pytest.mark.parametrize("path", RSCS, ids=[p.name for p in RSCS])
def test_shipped_contracts_validate(path: Path) -> None:
    _validator("rsc").validate(json.loads(path.read_text()))


@pytest.mark.parametrize("path", EXPLAINS, ids=[p.name for p in EXPLAINS])
def test_golden_explains_validate(path: Path) -> None:
    _validator("explain").validate(json.loads(path.read_text()))


@pytest.mark.parametrize("path", RECEIPTS, ids=[p.name for p in RECEIPTS])
def test_golden_receipts_validate(path: Path) -> None:
    # The golden receipts are normalized: lineage, retained and operational are left out.
    schema = json.loads((PUBLISHED / "receipt.schema.json").read_text())
    schema["required"] = [f for f in schema["required"] if f not in ("lineage", "retained", "operational")]
    jsonschema.Draft202012Validator(schema).validate(json.loads(path.read_text()))


def test_a_receipt_validates(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(FIXTURES / "plans" / "showcase.json")
    _validator("receipt").validate(json.loads(receipt.model_dump_json()))


def test_race_schema_prints_every_published_document(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from race.cli.main import build_parser, main

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    choices = next(a.choices for a in commands["schema"]._actions if a.dest == "document")
    assert choices is not None and sorted(choices) == sorted(DOCUMENTS)
    assert main(["schema", "catalog"]) == 0
    assert json.loads(capsys.readouterr().out) == document_schema("catalog")


def test_a_plan_naming_its_schema_validates_and_parses_as_without_it(tmp_path: Path) -> None:
    """A "$schema" key (an editor's pointer to the published schema) is valid against that
    schema, and every parser accepts and ignores it: the plan and its fingerprint are the same."""
    from planner import logical_fingerprint, parse_plan, plan_from_dict
    from race.cli.main import main
    from rsc import PlanError

    raw = json.loads((FIXTURES / "plans" / "showcase.json").read_text())
    named = {"$schema": "https://example.org/race/plan.schema.json", **raw}
    _validator("plan").validate(named)
    plain = parse_plan(json.dumps(raw))
    assert parse_plan(json.dumps(named)) == plain == plan_from_dict(named)
    assert logical_fingerprint(plan_from_dict(named)) == logical_fingerprint(plain)
    assert Engine.parse(named) == plain
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(named))
    assert main(["plan", str(path), "--index", "bundled"]) == 0
    with pytest.raises(PlanError, match=r"\$schema"):
        plan_from_dict({**raw, "$schema": 3})
