"""A LlamaIndex retriever over a RACE engine (``pip install 'race-engine[llamaindex]'``).

``RaceRetriever`` is a ``BaseRetriever``: ``retrieve`` and ``aretrieve`` return
``NodeWithScore(TextNode)`` objects, one per evidence item in rank order, and keep the receipt
on ``last_receipt``::

    from race.integrations.llamaindex import RaceRetriever

    retriever = RaceRetriever("notes-index", k=5)
    nodes = retriever.retrieve("the broker ran out of memory")
    nodes[0].node.metadata["race_custody"]
    retriever.last_receipt.gaps

A node's ``id_`` is the evidence key, its text the best hit's text, its score the fused score
(``None`` where one backend's own order ranked it) and its metadata the corpus's fields with
RACE's custody, rank, status, obligations, every hit's custody (``race_custody``) and the
receipt's ``race_gaps``, ``race_coverage``, ``race_obligation_status`` and
``race_evidence_fingerprint`` (``race.integrations.common``). RACE's own keys are left out of
the text an LLM or an embedding model is shown; the corpus's fields and the source location
are not. An answer with no nodes still says what was not searched: on ``last_receipt``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from race.extras import require

require("llama_index.core", feature="race.integrations.llamaindex", where="import")

from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.callbacks import CallbackManager  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

from race.integrations.common import (  # noqa: E402
    check_budget,
    content_of,
    item_metadata,
    open_engine,
    receipt_metadata,
    score_of,
    search_plan,
)
from race.search import filters_of  # noqa: E402

if TYPE_CHECKING:
    from planner.logical import LogicalPlan
    from race.engine import Engine
    from race.receipt import Receipt
    from race.search import StrategyName, WhereInput


def nodes_of(receipt: Receipt) -> list[NodeWithScore]:
    """One ``NodeWithScore(TextNode)`` per evidence item, in rank order."""
    beside = receipt_metadata(receipt)
    out: list[NodeWithScore] = []
    for item in receipt.evidence:
        meta = item_metadata(item, beside)
        hidden = [key for key in meta if key.startswith("race_")] + ["source_hash"]
        node = TextNode(
            id_=item.key,
            text=content_of(item),
            metadata=meta,
            excluded_llm_metadata_keys=hidden,
            excluded_embed_metadata_keys=hidden,
        )
        out.append(NodeWithScore(node=node, score=score_of(item)))
    return out


class RaceRetriever(BaseRetriever):
    """Retrieves with a RACE engine's one-line search.

    :param engine: an ``Engine``, or an index directory to open one on.
    :param k: how many evidence items to return.
    :param strategy: ``exact``, ``lexical``, ``vector``, ``hybrid``, ``structural`` or ``graph``;
        ``None`` is a hybrid search.
    :param where: RACE hard filters every search holds (a ``Field`` expression, filter dicts or
        the mapping shorthand).
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
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        check_budget(deadline_ms, leg_timeout_ms)
        self.engine, self.index_path = open_engine(engine)
        self.k = k
        self.strategy = strategy
        self.where = filters_of(where)
        self.index = index
        self.deadline_ms = deadline_ms
        self.leg_timeout_ms = leg_timeout_ms
        self.last_receipt: Receipt | None = None
        """The receipt of the latest retrieval: its gaps and coverage, even with no nodes."""

    def _plan(self, query: QueryBundle) -> LogicalPlan:
        return search_plan(
            self.engine,
            query.query_str,
            k=self.k,
            where=self.where or None,
            strategy=self.strategy,
            index=self.index,
            deadline_ms=self.deadline_ms,
            leg_timeout_ms=self.leg_timeout_ms,
        )

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        receipt = self.engine.run_sync(self._plan(query_bundle), where="search")
        self.last_receipt = receipt
        return nodes_of(receipt)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        receipt = await self.engine.run(self._plan(query_bundle), where="search")
        self.last_receipt = receipt
        return nodes_of(receipt)
