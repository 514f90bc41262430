"""The reference documents under docs/reference/ are current (made from the schemas by
``python -m race.schemas --docs docs``), list every field of every record with its
description, explain every gap kind, and link only to headings they have."""

from __future__ import annotations

import re

import pytest

from race.evidence.reference import REFERENCES, reference
from race.schemas import document_schema
from rsc import GapKind
from tests.conftest import ROOT

DOCS = ROOT / "docs" / "reference"


@pytest.mark.parametrize("document", sorted(REFERENCES))
def test_reference_is_current(document: str) -> None:
    published = (DOCS / f"{document}.md").read_text(encoding="utf-8")
    assert published == reference(document), "regenerate with: python -m race.schemas --docs docs"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip("`"): parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("document", sorted(REFERENCES))
def test_every_field_is_listed_with_its_description(document: str) -> None:
    schema = document_schema(document)
    sections = _sections(reference(document))
    records = {"The document": schema, **schema.get("$defs", {})}
    for name, node in records.items():
        for field in node.get("properties", {}):
            row = re.search(rf"^\| `{re.escape(field)}` \|(.*)\|$", sections[name], re.MULTILINE)
            assert row, f"{document}: {name}.{field} is not listed"
            description = row.group(1).rsplit("|", 1)[-1].strip()
            assert description, f"{document}: {name}.{field} has no description"


def test_every_gap_kind_says_when_it_occurs() -> None:
    table = _sections(reference("receipt"))["GapKind"]
    for kind in GapKind:
        row = re.search(rf"^\| `{kind.value}` \| (.+) \|$", table, re.MULTILINE)
        assert row and len(row.group(1)) > 20, f"gap kind {kind.value} is not explained"


@pytest.mark.parametrize("document", sorted(REFERENCES))
def test_links_point_at_headings(document: str) -> None:
    text = reference(document)
    anchors = {re.sub(r"[^a-z0-9_ -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", text, re.M)}
    for target in re.findall(r"\]\(#([^)]+)\)", text):
        assert target in anchors, f"{document}: link to #{target} has no heading"
