"""The JSON Schemas of the documents RACE reads and writes, as `race schema` prints them and
as they are published under docs/schemas/ (``python -m race.schemas docs/schemas`` writes
them; tests/test_schemas.py checks that the published files are current and that the
fixtures validate against them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DOCUMENTS = ("plan", "rsc", "receipt", "explain")


def document_schema(document: str) -> dict[str, Any]:
    """The JSON Schema of one document type, with ``$schema`` (the 2020-12 dialect pydantic
    writes) and an ``$id`` naming the document's own schema version (``urn:race:race.plan/1``)."""
    from pydantic import BaseModel

    from planner import EXPLAIN_SCHEMA_VERSION, PLAN_SCHEMA_VERSION, Explain, LogicalPlan
    from race.receipt import RECEIPT_SCHEMA_VERSION, Receipt
    from rsc import RSC_SCHEMA_VERSION, Contract

    models: dict[str, tuple[type[BaseModel], str]] = {
        "plan": (LogicalPlan, PLAN_SCHEMA_VERSION),
        "rsc": (Contract, RSC_SCHEMA_VERSION),
        "receipt": (Receipt, RECEIPT_SCHEMA_VERSION),
        "explain": (Explain, EXPLAIN_SCHEMA_VERSION),
    }
    model, version = models[document]
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": f"urn:race:{version}", **model.model_json_schema()}


def schema_text(document: str) -> str:
    return json.dumps(document_schema(document), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("docs/schemas")
    out.mkdir(parents=True, exist_ok=True)
    for document in DOCUMENTS:
        (out / f"{document}.schema.json").write_text(schema_text(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
