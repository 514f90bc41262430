"""Renderers for an ``Explain`` tree: text for people, canonical JSON for programs.

The tree is built once by the optimizer; renderers only format it, so both views always
agree and both are deterministic bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.optimizer import Explain
from planner.physical import FusionSpec, HybridNode, OperatorNode, PhysicalNode, ScanNode, UnsatisfiableNode
from rsc import UNCALIBRATED, ExpectedRecall, canonical_pretty


def render_json(explain: Explain) -> str:
    return canonical_pretty(explain) + "\n"


def render_text(explain: Explain) -> str:
    fp = explain.fingerprints
    lines = [
        f"plan        {fp.plan}",
        f"logical     {fp.logical}",
        f"contracts   {fp.contracts}  ({', '.join(explain.contracts)})",
    ]
    for backend, generation in sorted(fp.backends.items()):
        lines.append(f"generation  {backend}: {generation}")
    lines += [
        f"caller      {fp.caller}",
        f"physical    {fp.physical}",
        f"statistics  {fp.statistics}",
        "",
        f"memo: {explain.bounds.groups} groups, {explain.bounds.alternatives} alternatives"
        f" (max {explain.bounds.max_alternatives_per_group}/group, {explain.bounds.max_memo_alternatives} total),"
        f" {explain.bounds.pruned} pruned",
    ]
    if explain.bounds.memo_limited:
        lines.append(f"  memo bound reached at: {', '.join(explain.bounds.memo_limited)}")
    for group in explain.groups:
        lines.append(f"G{group.id} {group.logical}: {group.kind}  required={group.required.value}")
        for alt in group.alternatives:
            mark = "*" if alt.chosen else " "
            rsc = f" {alt.rsc}" if alt.rsc else ""
            lines.append(
                f"  {mark} {alt.rule}{rsc}  cost={alt.cost:.3f}ms reach={alt.reach.value} model_calls={alt.model_calls}"
            )
            for loss in alt.losses:
                recall = f" recall={loss.recall}" if loss.recall is not None else ""
                if loss.translation == "pushed_ann" and loss.recall is None:
                    recall = " recall=uncalibrated (nothing promised)"
                lines.append(f"        filter {loss.filter}: {loss.translation}{recall}")
            if alt.estimate is not None:
                est = alt.estimate
                lines.append(
                    f"        estimate: {est.rows} rows x selectivity {est.selectivity:.6g} ({est.basis})"
                    f" -> {est.candidates:.0f} candidates ({est.access}); {est.latency}"
                )
            if alt.revision is not None:
                lines.append(f"        revision: {alt.revision}")
            if alt.early_stop is not None and alt.chosen:
                verdict = "admissible" if alt.early_stop.admissible else "no"
                lines.append(f"        early stop: {verdict} ({alt.early_stop.reason})")
            for reason in alt.rejected_because:
                lines.append(f"        rejected: {reason}")
        for note in group.pruned:
            lines.append(f"    pruned: {note}")
    if explain.revisions:
        lines.append("")
        lines.append("revisions:")
        for rev in explain.revisions:
            lines.append(f"  G{rev.group} {rev.logical}: {rev.rule}: {rev.detail}")
    lines += ["", "physical:"]
    _render_node(explain.physical, 1, lines, fp.backends)
    return "\n".join(lines) + "\n"


def _render_node(node: PhysicalNode, depth: int, lines: list[str], generations: Mapping[str, str]) -> None:
    pad = "  " * depth
    if isinstance(node, ScanNode):
        req = node.request
        pushed = ", ".join(f.describe() for f in req.pushed) or "-"
        residual = ", ".join(f.describe() for f in req.residual) or "-"
        lines.append(
            f"{pad}scan {node.node} [G{node.group}] {node.rsc} mode={req.mode} k={req.k}"
            f" pushed=[{pushed}] residual=[{residual}] reach={node.reach.value}"
            f" deadline={node.deadline_ms}ms model_calls={node.model_calls}"
        )
        if node.expected_recall is not None:
            lines.append(f"{pad}  expected recall: {describe_recall(node.expected_recall)}")
        shards = scatter_of(generations.get(req.backend, ""))
        if shards:
            lines.append(f"{pad}  scatter to {len(shards)} shards, exact top-k merge: {'; '.join(shards)}")
        for gap in node.planned_gaps:
            lines.append(f"{pad}  gap {gap.kind.value}: {gap.detail}")
    elif isinstance(node, HybridNode):
        lines.append(
            f"{pad}hybrid {node.node} [G{node.group}] fusion={describe_fusion(node.fusion)} reach={node.reach.value}"
        )
        for leg in node.legs:
            _render_node(leg, depth + 1, lines, generations)
    elif isinstance(node, UnsatisfiableNode):
        lines.append(f"{pad}unsatisfiable {node.node} [G{node.group}]")
        for gap in node.gaps:
            lines.append(f"{pad}  gap {gap.kind.value}: {gap.detail}")
    elif isinstance(node, OperatorNode):
        extra = " (filters pushed into input)" if node.pushed_into_children else ""
        fusion = f" fusion={describe_fusion(node.fusion)}" if node.fusion else ""
        lines.append(f"{pad}{node.op.value} {node.node} [G{node.group}]{fusion}{extra}")
        for child in node.children:
            _render_node(child, depth + 1, lines, generations)


def scatter_of(generation: str) -> list[str]:
    """``label=generation`` of each shard a sharded instance's generation names (its form is
    ``sharded(s0=<gen>; s1=<gen>)``, ``backends.sharding.sharded``); ``[]`` for any other backend."""
    if not (generation.startswith("sharded(") and generation.endswith(")")):
        return []
    return generation[len("sharded(") : -1].split("; ")


def describe_fusion(fusion: FusionSpec) -> str:
    top = f" top {fusion.top_k}" if fusion.top_k is not None else ""
    if fusion.method == "score_sum":
        kind = fusion.score_kind.value if fusion.score_kind is not None else "score"
        return f"score_sum(similarity of {kind}){top}"
    return f"rrf(k={fusion.k}){top}"


def describe_recall(expected: ExpectedRecall) -> str:
    if expected.calibration == UNCALIBRATED:
        return (
            f"not calibrated on this index generation: nothing promised for bucket {expected.bucket} "
            "(race calibrate DIR measures it)"
        )
    if expected.recall is None:
        return f"not measured for bucket {expected.bucket} (nothing promised; calibration {expected.calibration})"
    return (
        f">= {expected.recall:.3f} at recall@{expected.k} (lower bound, bucket {expected.bucket}, "
        f"{expected.queries} queries, calibration {expected.calibration})"
    )
