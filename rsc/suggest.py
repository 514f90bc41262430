"""Did-you-mean suggestions for errors: the closest known name to a misspelt one (a command,
a flag, a field of a record), found with ``difflib``, and the fields a record accepts at a
place of a validation error's location. pydantic is imported only for the latter, so that a
misspelt flag is answered without it."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or ``""`` when none is close."""
    close = difflib.get_close_matches(word, sorted(set(known)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _members(tp: Any) -> list[Any]:
    """The types a hint stands for: the members of a union, the type inside ``Annotated``."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for arg in typing.get_args(tp) for m in _members(arg)]
    return [tp]


def _models(tp: Any) -> list[type[BaseModel]]:
    from pydantic import BaseModel  # only a validation error's suggestion needs it

    return [m for m in _members(tp) if isinstance(m, type) and issubclass(m, BaseModel)]


def _step(tps: list[Any], part: str | int) -> list[Any]:
    """The types at ``part`` (a field name, an item index, or a tagged union's tag) of ``tps``."""
    from pydantic import BaseModel

    found: list[Any] = []
    for tp in tps:
        for member in _members(tp):
            origin = typing.get_origin(member)
            args = typing.get_args(member)
            if isinstance(part, int) and origin in (tuple, list) and args:
                found.append(args[0])
            elif isinstance(part, str) and origin is dict and len(args) == 2:
                found.append(args[1])
            elif isinstance(member, type) and issubclass(member, BaseModel) and part in member.model_fields:
                found.append(member.model_fields[str(part)].annotation)
    if not found and isinstance(part, str):
        # A tagged union names the member it chose by its tag: keep the members whose literal is it.
        for tp in tps:
            for model in _models(tp):
                for field in model.model_fields.values():
                    if typing.get_origin(field.annotation) is typing.Literal and part in typing.get_args(
                        field.annotation
                    ):
                        found.append(model)
    return found


def known_fields(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The field names the record at ``loc`` (a validation error's location, without its last
    part) accepts, as far as the models tell."""
    tps: list[Any] = [model]
    for part in loc:
        tps = _step(tps, part)
    return sorted({name for tp in tps for m in _models(tp) for name in m.model_fields})


DOCUMENTS: dict[str, str] = {
    "race.plan/1": "a plan",
    "race.receipt/1": "a receipt",
    "race.rsc/1": "a contract (RSC)",
    "race.explain/1": "an explain",
    "race.catalog/1": "a catalog",
    "race.verify/1": "a verify report",
    "race.schema/1": "a corpus schema",
    "race.index/1": "an index manifest",
}
"""What each document type of RACE is called, by its ``schema_version``."""


def schema_version_error(raw: dict[str, Any], expected: str) -> str | None:
    """Why ``raw`` is not a document of version ``expected``, in words: its ``schema_version``
    is missing, names another document type of RACE (a receipt where a plan is expected), or
    is something else; ``None`` when it is ``expected``."""
    found = raw.get("schema_version")
    if found == expected:
        return None
    kind = DOCUMENTS.get(expected, expected)
    if "schema_version" not in raw:
        return f'field \'schema_version\' is missing ({kind} starts with "schema_version": "{expected}")'
    if isinstance(found, str) and found in DOCUMENTS:
        return f"this is {DOCUMENTS[found]} ({found}), not {kind} ({expected})"
    return f"field 'schema_version' must be {expected!r}, got {found!r}"
