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
    """``rrf`` (reciprocal rank fusion) or ``score_sum`` (the sum of calibrated similarities)."""
    k: Annotated[int, Field(ge=1)] = 60
    """``rrf``: the constant added to each 1-based rank."""
    top_k: Annotated[int, Field(ge=1)] | None = None
    """Only the best ``top_k`` are kept, if set."""
    score_kind: ScoreKind | None = None
    """``score_sum``: the score kind every input shares."""


RRF = FusionSpec()
"""RRF with k = 60, the fusion of every fusing node whose inputs are not calibrated."""


class EarlyStopVerdict(Record):
    admissible: bool
    """Whether a threshold-algorithm early stop is admissible here (I9)."""
    reason: str
    """Why or why not."""


@lru_cache(maxsize=1024)
def verdict_of(admissible: bool, reason: str) -> EarlyStopVerdict:
    """Verdicts are few and immutable: one record each, shared by every node that has it."""
    return EarlyStopVerdict(admissible=admissible, reason=reason)


class ScanNode(Record):
    kind: Literal["scan"] = "scan"
    """Always ``scan``: one leg, one backend call."""
    node: str
    """The logical node (obligation id) the leg serves."""
    group: int
    """The memo group it was chosen in."""
    rsc: str
    """The contract scanned, ``rsc_id@version``."""
    request: ScanRequest
    """The translated request the backend receives."""
    reach: SearchCoverage
    """The best search coverage the scan can reach."""
    planned_gaps: tuple[Gap, ...] = ()
    """Gaps known at plan time (e.g. a post-filter only filter), carried into the receipt."""
    model_calls: int
    """The embedding-model calls the scan makes."""
    cost: CanonicalFloat
    """The expected cost, in milliseconds."""
    deadline_ms: int
    """The leg's deadline, in milliseconds."""
    expected_recall: ExpectedRecall | None = None
    """An approximate contract's calibrated promise for this request (its selectivity bucket)."""


class HybridNode(Record):
    kind: Literal["hybrid"] = "hybrid"
    """Always ``hybrid``: several legs fused into one answer."""
    node: str
    """The logical node (obligation id) the legs serve."""
    group: int
    """The memo group it was chosen in."""
    legs: tuple[ScanNode, ...]
    """The scans fused."""
    fusion: FusionSpec = RRF
    """How their answers are fused."""
    reach: SearchCoverage
    """The best search coverage the fused answer can reach (the weakest leg's)."""
    early_stop: EarlyStopVerdict
    """Whether the fusion may stop early, and why."""


class UnsatisfiableNode(Record):
    kind: Literal["unsatisfiable"] = "unsatisfiable"
    """Always ``unsatisfiable``: no contract may serve the node."""
    node: str
    """The logical node that cannot be served."""
    group: int
    """Its memo group."""
    gaps: tuple[Gap, ...]
    """Why, as the gaps the receipt reports."""


class OperatorNode(Record):
    kind: Literal["operator"] = "operator"
    """Always ``operator``."""
    node: str
    """The logical operator's id."""
    group: int
    """Its memo group."""
    op: OperatorKind
    """The operator."""
    children: tuple[PhysicalNode, ...]
    """The physical nodes of its inputs, in input order."""
    pushed_into_children: bool = False
    """Whether a ``refine``'s filters were pushed into its input's scans."""
    fusion: FusionSpec | None = None
    """How a fusing operator (union) orders what its inputs found."""
    early_stop: EarlyStopVerdict
    """Whether the operator may stop early, and why."""


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
