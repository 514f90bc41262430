"""The physical plan tree: every node names the logical node it serves (I1)."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

from pydantic import Field

from rsc import CanonicalFloat, ExpectedRecall, Gap, OperatorKind, Record, ScanRequest, ScoreKind, SearchCoverage


class FusionSpec(Record):
    """How a fusing node orders what its inputs found; ties broken by the canonical evidence key.

    ``rrf``: reciprocal rank fusion with constant ``k`` over 1-based ranks, for scores that are
    not calibrated against each other. ``score_sum``: the sum over inputs of each row's
    calibrated similarity (I11), every input's score of every candidate read exactly (by
    random access where the input's own answer did not hold it); an input that cannot hold
    a row contributes the floor of the score kind. ``top_k``: only the best ``top_k`` are kept.
    """

    method: Literal["rrf", "score_sum"] = "rrf"
    k: Annotated[int, Field(ge=1)] = 60
    top_k: Annotated[int, Field(ge=1)] | None = None
    score_kind: ScoreKind | None = None


RRF = FusionSpec()
"""RRF with k = 60, the fusion of every fusing node whose inputs are not calibrated."""


class EarlyStopVerdict(Record):
    admissible: bool
    reason: str


@lru_cache(maxsize=1024)
def verdict_of(admissible: bool, reason: str) -> EarlyStopVerdict:
    """Verdicts are few and immutable: one record each, shared by every node that has it."""
    return EarlyStopVerdict(admissible=admissible, reason=reason)


class ScanNode(Record):
    kind: Literal["scan"] = "scan"
    node: str
    group: int
    rsc: str
    request: ScanRequest
    reach: SearchCoverage
    planned_gaps: tuple[Gap, ...] = ()
    model_calls: int
    cost: CanonicalFloat
    deadline_ms: int
    expected_recall: ExpectedRecall | None = None
    """An approximate contract's calibrated promise for this request (its selectivity bucket)."""


class HybridNode(Record):
    kind: Literal["hybrid"] = "hybrid"
    node: str
    group: int
    legs: tuple[ScanNode, ...]
    fusion: FusionSpec = RRF
    reach: SearchCoverage
    early_stop: EarlyStopVerdict


class UnsatisfiableNode(Record):
    kind: Literal["unsatisfiable"] = "unsatisfiable"
    node: str
    group: int
    gaps: tuple[Gap, ...]


class OperatorNode(Record):
    kind: Literal["operator"] = "operator"
    node: str
    group: int
    op: OperatorKind
    children: tuple[PhysicalNode, ...]
    pushed_into_children: bool = False
    fusion: FusionSpec | None = None
    early_stop: EarlyStopVerdict


PhysicalNode = Annotated[ScanNode | HybridNode | UnsatisfiableNode | OperatorNode, Field(discriminator="kind")]
OperatorNode.model_rebuild()

LeafNode = ScanNode | HybridNode | UnsatisfiableNode


def walk(node: PhysicalNode) -> list[PhysicalNode]:
    """Pre-order, children in plan order; deterministic."""
    out: list[PhysicalNode] = [node]
    if isinstance(node, OperatorNode):
        for child in node.children:
            out += walk(child)
    return out


def scans(node: PhysicalNode) -> list[ScanNode]:
    out: list[ScanNode] = []
    for item in walk(node):
        if isinstance(item, ScanNode):
            out.append(item)
        elif isinstance(item, HybridNode):
            out += list(item.legs)
    return out
