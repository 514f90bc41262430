"""One-line search: the standard one-obligation plan a text query stands for, and a small typed
filter expression for its ``where``.

``engine.search(text, k=…, where=…, strategy=…)`` is ``engine.run(plan_for_search(…))``: the plan
is an ordinary ``race.plan/1`` document, the one a user would write by hand, so that
``engine.plan_for_search(…)`` can be explained, kept, edited and replayed like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, TypedDict

from rsc import InputError

Scalar: TypeAlias = str | int | float | bool

StrategyName = Literal["exact", "lexical", "vector", "hybrid", "structural", "graph"]
KindName = Literal[
    "seek_support",
    "seek_refutation",
    "seek_exception_or_defeater",
    "seek_fresher_state",
    "seek_identity_counterexample",
    "seek_independent_origin",
]

QUERY_CLASS: dict[str, str] = {
    "exact": "identifier",
    "lexical": "lexical",
    "vector": "conceptual",
    "hybrid": "broad_question",
    "structural": "symbol_relation",
    "graph": "dependency",
}
"""A strategy -> the query class it is the default strategy of; with no strategy a search is a
``broad_question`` (hybrid: lexical and vector legs fused by rank)."""


class Field:
    """A metadata field in a filter expression: ``Field("status") == "fixed"``,
    ``Field("version").isin(["1.2", "1.3"])``, ``Field("date") >= "2024-01-01"``,
    ``Field("date").between("2024-01-01", "2024-12-31")``, ``Field("status") != "fixed"``,
    ``Field("version").not_in(["1.2"])``, ``Field("path").startswith("docs/mail/")``,
    ``Field("date").exists()``; join them with ``&`` (every one must hold) or ``|`` (at least one:
    an ``any_of`` group of single-field filters). Each becomes one of the plan's typed hard filters."""

    def __init__(self, name: str) -> None:
        if not name:
            raise InputError("a filter needs a field name", where="where")
        self.name = name

    def __eq__(self, value: object) -> Where:  # type: ignore[override]
        return Where(({"field": self.name, "op": "eq", "value": _scalar(value, self.name)},))

    def __ne__(self, value: object) -> Where:  # type: ignore[override]
        """Rows whose field has a value other than ``value`` (a row without the field: no)."""
        return Where(({"field": self.name, "op": "ne", "value": _scalar(value, self.name)},))

    def __hash__(self) -> int:
        return hash(self.name)

    def not_in(self, values: Iterable[Scalar]) -> Where:
        """Rows whose field has a value, none of ``values`` (a row without the field: no)."""
        found = [_scalar(v, self.name) for v in values]
        if not found:
            raise InputError(f"field {self.name!r}: not_in needs at least one value", where="where")
        return Where(({"field": self.name, "op": "not_in", "values": found},))

    def startswith(self, prefix: str) -> Where:
        """Rows whose (keyword) field starts with ``prefix``, taken literally (no wildcards)."""
        if not isinstance(prefix, str) or not prefix:
            raise InputError(f"field {self.name!r}: startswith needs a non-empty string", where="where")
        return Where(({"field": self.name, "op": "prefix", "value": prefix},))

    def exists(self) -> Where:
        """Rows that have a value for the field."""
        return Where(({"field": self.name, "op": "exists"},))

    def isin(self, values: Iterable[Scalar]) -> Where:
        found = [_scalar(v, self.name) for v in values]
        if not found:
            raise InputError(f"field {self.name!r}: isin needs at least one value", where="where")
        return Where(({"field": self.name, "op": "in", "values": found},))

    def __ge__(self, bound: Scalar) -> Where:
        return Where(({"field": self.name, "op": "range", "gte": _scalar(bound, self.name)},))

    def __le__(self, bound: Scalar) -> Where:
        return Where(({"field": self.name, "op": "range", "lte": _scalar(bound, self.name)},))

    def between(self, low: Scalar, high: Scalar) -> Where:
        """Inclusive at both ends."""
        return Where(
            ({"field": self.name, "op": "range", "gte": _scalar(low, self.name), "lte": _scalar(high, self.name)},)
        )


class Where:
    """Filters that must all hold, as the plan's filter dicts (``filters``)."""

    def __init__(self, filters: tuple[dict[str, Any], ...]) -> None:
        self.filters = filters

    def __and__(self, other: Where) -> Where:
        return Where(self.filters + other.filters)

    def __or__(self, other: Where) -> Where:
        """At least one side holds: one ``any_of`` group of the sides' single-field filters."""
        return Where(({"op": "any_of", "any_of": [*self._members(), *other._members()]},))

    def _members(self) -> list[dict[str, Any]]:
        if len(self.filters) != 1:
            raise InputError(
                "'|' joins single filters (an any_of group holds single-field filters, not '&' of several)",
                where="where",
            )
        only = self.filters[0]
        return [dict(f) for f in only["any_of"]] if only.get("op") == "any_of" else [dict(only)]

    def __repr__(self) -> str:
        return f"Where({list(self.filters)!r})"


WhereInput: TypeAlias = Where | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


class SearchOptions(TypedDict, total=False):
    """``engine.search``'s options, each optional: ``k`` (10), ``where`` (no filter), ``strategy``
    (none: a ``broad_question``, served hybrid), ``kind`` (``seek_support``), ``index`` (every
    backend)."""

    k: int
    where: WhereInput
    strategy: StrategyName | None
    kind: KindName
    index: str | None


def _scalar(value: object, field: str) -> Scalar:
    if isinstance(value, str | int | float | bool):
        return value
    raise InputError(
        f"field {field!r}: a filter value is a string, number or boolean, not {type(value).__name__}", where="where"
    )


def filters_of(where: WhereInput) -> list[dict[str, Any]]:
    """``where`` as the plan's hard filters: a ``Where`` expression, a list of filter dicts as a
    plan writes them, or a mapping shorthand ``{"status": "fixed", "version": ["1.2", "1.3"]}``
    (a list means any one of its values)."""
    if where is None:
        return []
    if isinstance(where, Where):
        return [dict(f) for f in where.filters]
    if isinstance(where, Mapping):
        if "op" in where and ("field" in where or "any_of" in where):
            return [dict(where)]
        out: list[dict[str, Any]] = []
        for name, value in where.items():
            field = Field(str(name))
            if isinstance(value, list | tuple | set | frozenset):
                out.extend(field.isin(sorted(value) if isinstance(value, set | frozenset) else value).filters)
            else:
                out.extend((field == value).filters)
        return out
    if isinstance(where, str | bytes):
        raise InputError("where is filters, not text: text never becomes a filter (I14)", where="where")
    return [dict(f) for f in where]


def plan_for_search(
    text: str,
    *,
    k: int = 10,
    where: WhereInput = None,
    strategy: StrategyName | None = None,
    kind: KindName = "seek_support",
    allow_contracts: Sequence[str] = (),
    deadline_ms: int | None = None,
) -> dict[str, Any]:
    """The one-obligation plan (``race.plan/1``) that searches ``text``: obligation ``q`` of
    ``kind``, served by ``strategy`` (its query class's default), ``k`` hits, ``where`` as hard
    filters, limited to ``allow_contracts`` when given."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("a search needs non-empty text", where="text")
    if strategy is not None and strategy not in QUERY_CLASS:
        raise InputError(f"unknown strategy {strategy!r} (one of {', '.join(QUERY_CLASS)})", where="strategy")
    obligation: dict[str, Any] = {
        "id": "q",
        "kind": kind,
        "query": {"text": text},
        "query_class": QUERY_CLASS[strategy or "hybrid"],
        "k": k,
    }
    filters = filters_of(where)
    if filters:
        obligation["hard_filters"] = filters
    if allow_contracts:
        obligation["allow_contracts"] = sorted(allow_contracts)
    plan: dict[str, Any] = {"schema_version": "race.plan/1", "root": "q", "obligations": [obligation]}
    if deadline_ms is not None:
        plan["budget"] = {"deadline_ms": deadline_ms}
    return plan
