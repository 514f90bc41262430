"""The JSON Schemas of RACE's documents, every property described by its model attribute's
docstring: what ``race.schemas`` publishes and the reference documents (``race.evidence.reference``)
are made from."""

from __future__ import annotations

import ast
import inspect
import sys
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import core_schema

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def document_schema(document: str) -> dict[str, Any]:
    """The JSON Schema of one document type, with ``$schema`` (the 2020-12 dialect pydantic
    writes) and an ``$id`` naming the document's own schema version (``urn:race:race.plan/1``)."""
    from pydantic import BaseModel

    from planner import EXPLAIN_SCHEMA_VERSION, PLAN_SCHEMA_VERSION, Explain, LogicalPlan
    from race.evidence.cite import CITE_SCHEMA_VERSION, CiteReport
    from race.evidence.packet_text import PACKET_SCHEMA_VERSION, Packet
    from race.indexing.catalog import CATALOG_SCHEMA_VERSION, Catalog
    from race.receipt import RECEIPT_SCHEMA_VERSION, Receipt
    from rsc import RSC_SCHEMA_VERSION, Contract

    models: dict[str, tuple[type[BaseModel], str]] = {
        "plan": (LogicalPlan, PLAN_SCHEMA_VERSION),
        "rsc": (Contract, RSC_SCHEMA_VERSION),
        "receipt": (Receipt, RECEIPT_SCHEMA_VERSION),
        "explain": (Explain, EXPLAIN_SCHEMA_VERSION),
        "catalog": (Catalog, CATALOG_SCHEMA_VERSION),
        "packet": (Packet, PACKET_SCHEMA_VERSION),
        "cite": (CiteReport, CITE_SCHEMA_VERSION),
    }
    model, version = models[document]
    schema = model.model_json_schema(schema_generator=_described())
    if document == "plan":
        # A plan may name its schema for an editor to validate against; the parser ignores it.
        pointer = {"type": "string", "description": "The JSON Schema the plan is written against; ignored."}
        schema["properties"] = {"$schema": pointer, **schema["properties"]}
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": f"urn:race:{version}", **schema}


@cache
def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings of a class's attributes (a string literal right under ``field: T``), its
    bases' first, each as one paragraph with markdown's single backticks: what a property's
    ``description`` is made of. They are read from the source, so importing a model costs
    nothing for them."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.split(".")[0] not in ("rsc", "planner", "race", "backends"):
            continue
        body = _class_nodes(klass.__module__).get(klass.__qualname__)
        if body is None:
            continue
        for statement, following in zip(body.body, body.body[1:], strict=False):
            target = getattr(statement, "target", None) if isinstance(statement, ast.AnnAssign) else None
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
            value = following.value if isinstance(following, ast.Expr) else None
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                docs[target.id] = " ".join(inspect.cleandoc(value.value).split()).replace("``", "`")
    return docs


@cache
def _class_nodes(module: str) -> dict[str, ast.ClassDef]:
    """The top-level classes of a module's source by name, the module parsed once."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _described() -> type[Any]:
    """pydantic's JSON Schema generator, with each model property described by its attribute
    docstring (a ``Field(description=…)`` wins)."""
    from pydantic import BaseModel
    from pydantic.json_schema import GenerateJsonSchema

    class Described(GenerateJsonSchema):
        def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
            json_schema = super().model_schema(schema)
            if isinstance(json_schema.get("description"), str):  # the class docstring, as markdown
                json_schema["description"] = json_schema["description"].replace("``", "`")
            cls = schema["cls"]
            assert issubclass(cls, BaseModel)
            docs = attribute_docs(cls)
            properties = json_schema.get("properties", {})
            for name, field in cls.model_fields.items():
                key = field.serialization_alias or field.alias or name
                if key in properties and name in docs:
                    properties[key].setdefault("description", docs[name])
            return json_schema

    return Described
