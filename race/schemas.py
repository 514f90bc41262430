"""The JSON Schemas of the documents RACE reads and writes, as `race schema` prints them and
as they are published under docs/schemas/ (``python -m race.schemas docs/schemas`` writes
them; tests/test_schemas.py checks that the published files are current and that the
fixtures validate against them). Every property is described by its model attribute's
docstring; the reference documents under docs/reference/ are made from them
(``race.evidence.reference``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from race.evidence.described import JSON_SCHEMA_DIALECT as JSON_SCHEMA_DIALECT
from race.evidence.described import attribute_docs as attribute_docs
from race.evidence.described import document_schema

DOCUMENTS = ("plan", "rsc", "receipt", "explain", "catalog", "packet", "cite")


def schema_text(document: str) -> str:
    return json.dumps(document_schema(document), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    """``python -m race.schemas [DIR]`` publishes the schemas (default docs/schemas);
    ``python -m race.schemas --docs [DIR]`` writes the reference documents (DIR/reference/)."""
    if argv[:1] == ["--docs"]:
        from race.evidence.reference import write_references

        write_references(Path(argv[1]) if len(argv) > 1 else Path("docs"))
        return 0
    out = Path(argv[0]) if argv else Path("docs/schemas")
    out.mkdir(parents=True, exist_ok=True)
    for document in DOCUMENTS:
        (out / f"{document}.schema.json").write_text(schema_text(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
