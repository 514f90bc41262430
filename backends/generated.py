"""Contracts generated for one index: a shipped contract (the template) with the filter table
the index's corpus schema calls for.

The template's identity fields (``doc_id``, ``chunk_id``) keep their entries; every other
entry is replaced by one per filterable schema field, with the template's own support class
for metadata (its ``doc_id`` entry: a backend filters every stored field the same way) and
the operators that field's type has (``range`` only for dates, datetimes and numbers) among
those the template's metadata entry declares (``ne``, ``not_in``, ``exists``, ``any_of``;
``prefix`` only for single-valued keywords). A
contract therefore never claims a field the index does not hold. For the bundled corpus's
schema the generated contracts are the shipped ones, byte for byte (a test checks it).

``race index`` writes them under ``<index>/<backend>/contracts/``; an adapter opened on that
index serves them (``Adapter.index_contracts``), and the planner sees only those.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from backends.ingest.schema import ORDERED_TYPES, CorpusSchema, FieldType
from rsc import Contract, FilterOp, FilterSupport, canonical_pretty, load_contract

IDENTITY_FIELDS = ("chunk_id", "doc_id")
CONTRACTS_DIR = "contracts"


def generate_contract(template: Contract, schema: CorpusSchema) -> Contract:
    """``template`` with the filter table of ``schema``."""
    metadata_support = template.filters.get("doc_id")
    filters: dict[str, FilterSupport] = {
        name: support for name, support in template.filters.items() if name in IDENTITY_FIELDS
    }
    if metadata_support is not None:
        for name, spec in schema.filterable().items():
            ops: tuple[FilterOp, ...] = (FilterOp.EQ, FilterOp.IN)
            if spec.type in ORDERED_TYPES:
                ops = (*ops, FilterOp.RANGE)
            ops += tuple(op for op in metadata_support.ops if op in field_ops(spec.type) and op not in ops)
            filters[name] = metadata_support.model_copy(update={"ops": ops})
    return template.model_copy(update={"filters": dict(sorted(filters.items()))})


def field_ops(kind: FieldType) -> tuple[FilterOp, ...]:
    """The operators beyond ``eq``, ``in`` and ``range`` that mean something on a field of ``kind``."""
    prefix = (FilterOp.PREFIX,) if kind is FieldType.KEYWORD else ()
    return (FilterOp.NE, FilterOp.NOT_IN, *prefix, FilterOp.EXISTS, FilterOp.ANY_OF)


def generate_contracts(templates: Sequence[Contract], schema: CorpusSchema) -> tuple[Contract, ...]:
    return tuple(generate_contract(t, schema) for t in templates)


def write_contracts(folder: Path, contracts: Sequence[Contract]) -> None:
    target = folder / CONTRACTS_DIR
    target.mkdir(parents=True, exist_ok=True)
    for contract in contracts:
        (target / f"{contract.rsc_id}.json").write_text(canonical_pretty(contract) + "\n", encoding="utf-8")


def read_contracts(folder: Path) -> tuple[Contract, ...] | None:
    """The contracts written for the index in ``folder``; ``None`` for an index built before
    contracts were generated (its adapter then serves the shipped ones)."""
    target = folder / CONTRACTS_DIR
    if not target.is_dir():
        return None
    return tuple(sorted((load_contract(p) for p in sorted(target.glob("*.json"))), key=lambda c: c.rsc_id))


def schema_of(manifest: dict[str, object]) -> CorpusSchema:
    """The corpus schema an adapter's own manifest records (the default for older indexes)."""
    from backends.ingest.schema import default_schema

    raw = manifest.get("schema")
    return CorpusSchema.model_validate(raw) if isinstance(raw, dict) else default_schema()


def schema_json(schema: CorpusSchema) -> object:
    return json.loads(schema.model_dump_json())
