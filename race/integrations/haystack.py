"""A Haystack 2 retriever component over a RACE engine (``pip install 'race-engine[haystack]'``).

``RaceRetriever`` returns Haystack ``Document`` objects, one per evidence item in rank order,
and the receipt beside them::

    from haystack import Pipeline
    from race.integrations.haystack import RaceRetriever

    pipeline = Pipeline()
    pipeline.add_component("retriever", RaceRetriever("notes-index", k=5))
    result = pipeline.run({"retriever": {"query": "the broker ran out of memory"}})
    result["retriever"]["documents"][0].meta["race_custody"]
    result["retriever"]["receipt"].gaps

A document's ``id`` is the evidence key, ``content`` the best hit's text, ``score`` the fused
score (``None`` where one backend's own order ranked it) and ``meta`` the corpus's fields with
RACE's custody, rank, status, obligations, every hit's custody (``race_custody``) and the
receipt's ``race_gaps``, ``race_coverage``, ``race_obligation_status`` and
``race_evidence_fingerprint`` (``race.integrations.common``). An answer with no documents still
says what was not searched: on the ``receipt`` output.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from race.extras import require

# Haystack reports usage over the network unless told not to; RACE keeps a query on this machine
# unless a plan says otherwise, so its component does not opt a user in (set the variable to
# "True" to allow it).
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
require("haystack", feature="race.integrations.haystack", where="import")

from haystack import Document, component, default_from_dict, default_to_dict  # noqa: E402
from haystack.core.errors import SerializationError  # noqa: E402

from race.integrations.common import (  # noqa: E402
    check_budget,
    content_of,
    haystack_filters,
    item_metadata,
    open_engine,
    receipt_metadata,
    score_of,
    search_plan,
)
from race.receipt import Receipt  # noqa: E402
from race.search import filters_of  # noqa: E402

if TYPE_CHECKING:
    from planner.logical import LogicalPlan
    from race.engine import Engine
    from race.search import StrategyName, WhereInput


def documents_of(receipt: Receipt) -> list[Document]:
    """One Haystack ``Document`` per evidence item, in rank order."""
    beside = receipt_metadata(receipt)
    return [
        Document(id=item.key, content=content_of(item), score=score_of(item), meta=item_metadata(item, beside))
        for item in receipt.evidence
    ]


@component
class RaceRetriever:
    """Retrieves with a RACE engine's one-line search: documents with custody and gaps, and the
    receipt.

    :param engine: an ``Engine``, or an index directory to open one on (only then can the
        component be serialized: ``to_dict`` keeps the path).
    :param k: how many evidence items to return (``top_k`` at run time overrides it).
    :param strategy: ``exact``, ``lexical``, ``vector``, ``hybrid``, ``structural`` or ``graph``;
        ``None`` is a hybrid search.
    :param where: RACE hard filters every search holds (a ``Field`` expression, filter dicts or
        the mapping shorthand); run-time ``filters`` are added to them, never replace them.
    :param index: limit the search to one backend's contracts.
    :param deadline_ms: the plan's deadline; ``leg_timeout_ms``: each leg's own (a leg past it is
        a ``timeout`` gap, not an empty answer).
    """

    def __init__(
        self,
        engine: Engine | str | os.PathLike[str],
        *,
        k: int = 10,
        strategy: StrategyName | None = None,
        where: WhereInput = None,
        index: str | None = None,
        deadline_ms: int | None = None,
        leg_timeout_ms: int | None = None,
    ) -> None:
        check_budget(deadline_ms, leg_timeout_ms)
        self.engine, self.index_path = open_engine(engine)
        self.k = k
        self.strategy = strategy
        self.where = filters_of(where)
        self.index = index
        self.deadline_ms = deadline_ms
        self.leg_timeout_ms = leg_timeout_ms

    def to_dict(self) -> dict[str, Any]:
        """The component by its index path; one built on an ``Engine`` object is refused (an
        engine's adapters are live objects, not configuration)."""
        if self.index_path is None:
            raise SerializationError(
                "RaceRetriever built on an Engine object cannot be serialized: build it on the index path"
            )
        return default_to_dict(
            self,
            engine=str(self.index_path),
            k=self.k,
            strategy=self.strategy,
            where=self.where,
            index=self.index,
            deadline_ms=self.deadline_ms,
            leg_timeout_ms=self.leg_timeout_ms,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RaceRetriever:
        """The component ``to_dict`` describes, on an engine opened on its index path."""
        built: RaceRetriever = default_from_dict(cls, data)
        return built

    def _plan(self, query: str, top_k: int | None, filters: dict[str, Any] | None) -> LogicalPlan:
        where = [*self.where, *haystack_filters(filters)]
        return search_plan(
            self.engine,
            query,
            k=self.k if top_k is None else top_k,
            where=where or None,
            strategy=self.strategy,
            index=self.index,
            deadline_ms=self.deadline_ms,
            leg_timeout_ms=self.leg_timeout_ms,
        )

    @component.output_types(documents=list[Document], receipt=Receipt)
    def run(self, query: str, top_k: int | None = None, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """Search ``query``: ``documents`` (one per evidence item) and the ``receipt``.

        :param query: the text to search.
        :param top_k: how many evidence items, instead of ``k``.
        :param filters: Haystack metadata filters (an ``AND`` of ``==``, ``in``, ``>=``, ``<=``;
            ``meta.`` prefixes are dropped), added to ``where``.
        """
        receipt = self.engine.run_sync(self._plan(query, top_k, filters), where="search")
        return {"documents": documents_of(receipt), "receipt": receipt}

    @component.output_types(documents=list[Document], receipt=Receipt)
    async def run_async(
        self, query: str, top_k: int | None = None, filters: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``run``, awaited on the caller's loop (``AsyncPipeline``)."""
        receipt = await self.engine.run(self._plan(query, top_k, filters), where="search")
        return {"documents": documents_of(receipt), "receipt": receipt}
