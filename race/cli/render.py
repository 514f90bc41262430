"""Text renderings of receipts for people; programs read the canonical JSON."""

from __future__ import annotations

from race.evidence.verify import cited_place
from race.receipt import Receipt
from rsc import canonical_pretty


def receipt_json(receipt: Receipt) -> str:
    return canonical_pretty(receipt) + "\n"


def receipt_text(receipt: Receipt, *, evidence_limit: int = 12) -> str:
    lines = [
        f"lineage   {receipt.lineage.id} ({receipt.lineage.mode}"
        + (f", parent {receipt.lineage.parent})" if receipt.lineage.parent else ")"),
        f"plan      {receipt.fingerprints.plan}",
        f"evidence  {receipt.fingerprints.evidence}",
    ]
    for model in receipt.models:
        lines.append(f"model     {model.get('name')} dims={model.get('dims')} {model.get('weights_sha256', '')}")
    cov = receipt.coverage
    lines.append(
        f"coverage  search={cov.search_coverage.value} closure={cov.support_closure.value}"
        + (f" opposition={cov.opposition_coverage.value}" if cov.opposition_coverage else "")
    )
    lines += ["", "obligations:"]
    for ob in receipt.obligations:
        lines.append(
            f"  {ob.id:<24} {ob.kind.value:<28} {ob.status.value:<13} coverage={ob.search_coverage.value}"
            f" (required {ob.required_coverage.value}) closure={ob.support_closure.value}"
            f" model_calls={ob.model_calls} evidence={ob.evidence_count}"
        )
        if ob.served_by:
            lines.append(f"  {'':<24} served by {', '.join(ob.served_by)}")
    if receipt.operators:
        lines += ["", "operators:"]
        for op in receipt.operators:
            extra = ""
            if op.opposition_coverage is not None:
                extra += f" opposition={op.opposition_coverage.value}"
            if op.independent_origins is not None:
                extra += f" origins={len(op.independent_origins)} ({', '.join(op.independent_origins)})"
            lines.append(
                f"  {op.id:<24} {op.op.value:<12} {op.status.value:<13} coverage={op.search_coverage.value}{extra}"
            )
    lines += ["", f"evidence ({len(receipt.evidence)} items):"]
    for item in receipt.evidence[:evidence_limit]:
        hit = item.hits[0]
        c = hit.custody
        digest = f"{c.source_hash[:19]}…" if c.source_hash is not None else "(no hash)"
        fusion = f" {item.fusion.method}={item.fusion.score}" if item.fusion.score is not None else ""
        lines.append(f"  {item.rank:>3}. {item.key}  [{item.status.value}] {','.join(item.obligations)}{fusion}")
        lines.append(
            f"       {cited_place(c.source_path, c.line_start, c.line_end)} {digest} "
            + "; ".join(
                f"{h.custody.rsc} {'#' + str(h.custody.rank) if h.custody.access == 'sorted' else 'random'} "
                f"{h.custody.score_kind.value}={h.custody.score:.4g}"
                for h in item.hits
            )
        )
        for rel in item.relations:
            lines.append(f"       relation {rel}")
    if len(receipt.evidence) > evidence_limit:
        lines.append(f"  … {len(receipt.evidence) - evidence_limit} more (use --json for all)")
    lines += ["", f"gaps ({len(receipt.gaps)}):"]
    for gap in receipt.gaps:
        backend = f" [{gap.backend}]" if gap.backend else ""
        lines.append(f"  {gap.obligation}: {gap.kind.value} ({gap.severity.value}){backend} {gap.detail}")
    return "\n".join(lines) + "\n"
