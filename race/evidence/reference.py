"""The reference documents under docs/reference/ (plan, RSC, receipt, explain, packet, cite), generated from
the published JSON Schemas (``race.schemas``: every property described by its attribute
docstring) and the vocabulary's member docstrings (what each gap kind, status and coverage
means, and when it occurs). ``python -m race.schemas --docs docs`` writes them;
tests/test_docs_reference.py checks that the committed copies are current."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from race.evidence.described import attribute_docs, document_schema

REFERENCES: dict[str, tuple[str, str]] = {
    "plan": (
        "Plan reference",
        "A logical plan (`race.plan/1`) is what `race plan` and `race run` read: typed retrieval "
        "obligations (the leaves), the operators that compose them, the root whose answer is the plan's, "
        "a budget and the caller's generations. Query text is data: filters, pins and the `mandatory` "
        "flag come only from these typed fields (I14).",
    ),
    "rsc": (
        "RSC reference",
        "A retrieval semantics contract (`race.rsc/1`) says what one backend capability does and "
        "guarantees: the query classes it serves, how it orders and scores, what an answer covers, how "
        "each metadata field can be filtered, how answers relate to index generations. The planner chooses "
        "only among contracts, and a contract generated for an index may be weakened, never strengthened.",
    ),
    "receipt": (
        "Receipt reference",
        "A receipt (`race.receipt/1`) is what `race run` prints: the evidence in rank order, each hit "
        "with its custody, every obligation's and operator's status and coverage, and every gap: what was "
        "not searched, not found or is uncertain, with when each kind occurs. Its normalized form "
        "(everything but `lineage`, `retained` and `operational`) depends only on the inputs, and replay "
        "reproduces it byte for byte.",
    ),
    "explain": (
        "Explain reference",
        "An explain (`race.explain/1`) is what `race plan --json` prints: the memo of every alternative "
        "weighed for each logical node, with its cost and the reasons it was rejected, the chosen physical "
        "plan and the fingerprints it was made from. Its bytes are deterministic.",
    ),
    "packet": (
        "Packet reference",
        "A context packet (`race.packet/1`) is what `race context --json` prints: a receipt's evidence "
        "quoted from the source files within a budget, every gap stated, and each passage numbered 1 to n "
        "by a handle that holds for this packet only. The same receipt, corpus and budget give the same bytes.",
    ),
    "cite": (
        "Cite reference",
        "A cite report (`race.cite/1`) is what `race cite --json` prints: each handle an answer cites, "
        "resolved through its packet and read again from the corpus, and the sentences that cite nothing.",
    ),
}

_CONSTRAINTS = (
    ("minimum", "≥ {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "≤ {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "at least {} characters"),
    ("minItems", "at least {} item(s)"),
    ("pattern", "matching `{}`"),
)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _link(name: str) -> str:
    return f"[`{name}`](#{name.lower()})"


def _type(spec: dict[str, Any]) -> str:
    """A property's JSON type in words, with links to the definitions it names."""
    if "$ref" in spec:
        return _link(spec["$ref"].rsplit("/", 1)[-1])
    for union in ("anyOf", "oneOf"):
        if union in spec:
            return " or ".join(dict.fromkeys(_type(s) for s in spec[union]))
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " or ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    kind = spec.get("type")
    if kind == "array":
        words = f"array of {_type(spec['items'])}" if "items" in spec else "array"
    elif kind == "object":
        extra = spec.get("additionalProperties")
        words = f"map of string to {_type(extra)}" if isinstance(extra, dict) else "object"
    elif kind is None:
        words = "any"
    else:
        words = str(kind)
    bounds = [form.format(spec[key]) for key, form in _CONSTRAINTS if key in spec]
    return f"{words} ({', '.join(bounds)})" if bounds else words


def _refs(spec: Any) -> list[str]:
    """The definitions a schema fragment names, in the order it names them."""
    if isinstance(spec, dict):
        found = [spec["$ref"].rsplit("/", 1)[-1]] if "$ref" in spec else []
        return found + [r for value in spec.values() for r in _refs(value)]
    if isinstance(spec, list):
        return [r for value in spec for r in _refs(value)]
    return []


def _order(schema: dict[str, Any]) -> list[str]:
    """The definitions in the order a reader meets them from the root, breadth first."""
    seen: list[str] = []
    queue = _refs(schema.get("properties", {}))
    defs = schema.get("$defs", {})
    while queue:
        name = queue.pop(0)
        if name in seen or name not in defs:
            continue
        seen.append(name)
        queue.extend(_refs(defs[name]))
    return seen + sorted(set(defs) - set(seen))


def _enum_class(name: str) -> type[Enum] | None:
    import rsc.vocab

    found = getattr(rsc.vocab, name, None)
    return found if isinstance(found, type) and issubclass(found, Enum) else None


def _section(name: str, node: dict[str, Any], heading: str) -> list[str]:
    lines = [heading, ""]
    if node.get("description"):
        lines += [" ".join(node["description"].split()).replace("``", "`"), ""]
    if "properties" in node:
        required = set(node.get("required", ()))
        lines += ["| field | type | required / default | description |", "|---|---|---|---|"]
        for field, spec in node["properties"].items():
            if field in required:
                need = "required"
            elif "default" in spec:
                need = f"`{json.dumps(spec['default'], sort_keys=True)}`"
            else:
                need = "optional"  # a default made by a factory (an empty map)
            lines.append(f"| `{field}` | {_cell(_type(spec))} | {_cell(need)} | {_cell(spec.get('description', ''))} |")
    elif "enum" in node:
        enum = _enum_class(name)
        docs = attribute_docs(enum) if enum is not None else {}
        by_value = {m.value: docs.get(m.name, "") for m in enum} if enum is not None else {}
        lines += ["| value | meaning |", "|---|---|"]
        lines += [f"| `{value}` | {_cell(by_value.get(value, ''))} |" for value in node["enum"]]
    elif "oneOf" in node or "anyOf" in node:
        lines.append(f"One of {_type(node)}.")
    else:
        lines.append(f"Type: {_type(node)}.")
    return [*lines, ""]


def reference(document: str) -> str:
    """The markdown reference of one document type."""
    title, intro = REFERENCES[document]
    schema = document_schema(document)
    lines = [
        f"# {title}",
        "",
        intro,
        "",
        f"JSON Schema: [`docs/schemas/{document}.schema.json`](../schemas/{document}.schema.json) "
        f"(`$id` `{schema['$id']}`). Generated from the models by `python -m race.schemas --docs docs`: "
        "edit the docstrings, not this file.",
        "",
    ]
    root = {k: v for k, v in schema.items() if k != "$defs"}
    lines += _section(schema.get("title", document), root, "## The document")
    defs = schema.get("$defs", {})
    for name in _order(schema):
        lines += _section(name, defs[name], f"## `{name}`")
    return "\n".join(lines).rstrip("\n") + "\n"


def write_references(out: Path) -> list[Path]:
    """Every reference document, written under ``out / "reference"``."""
    folder = out / "reference"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for document in REFERENCES:
        path = folder / f"{document}.md"
        path.write_text(reference(document), encoding="utf-8")
        written.append(path)
    return written
