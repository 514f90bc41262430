"""Pictures of an ``Explain``: Graphviz DOT and Mermaid flowcharts of the memo and the chosen plan.

Each memo group is a box holding its alternatives: the chosen one bold, the rejected ones
dimmed with the reason they lost, and the gaps known at plan time marked in red beside the
alternative that carries them. Edges follow the chosen physical tree. Like the text and JSON
renderers, these only format the tree the optimizer built, and are deterministic bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memo import Group
from planner.optimizer import Explain
from planner.physical import HybridNode, OperatorNode, PhysicalNode, ScanNode, UnsatisfiableNode
from rsc import Gap

_REASON_CHARS = 90


@dataclass(frozen=True)
class _Box:
    id: str
    label: tuple[str, ...]
    chosen: bool


def _short(text: str, limit: int = _REASON_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _boxes(group: Group) -> list[_Box]:
    out = []
    for index, alt in enumerate(group.alternatives):
        label = [f"{alt.rule} {alt.rsc}".strip(), f"cost {alt.cost:g} ms, reach {alt.reach.value}"]
        if not alt.chosen:
            label += [f"rejected: {_short(reason)}" for reason in alt.rejected_because]
        out.append(_Box(id=f"G{group.id}_a{index}", label=tuple(label), chosen=alt.chosen))
    if not any(b.chosen for b in out):
        # An unsatisfiable group: the physical node stands in for the chosen alternative.
        out.append(_Box(id=f"G{group.id}_none", label=("Unsatisfiable", "no contract may serve it"), chosen=True))
    return out


def _chosen_box(group: Group) -> str:
    return next(b.id for b in _boxes(group) if b.chosen)


def _physical_by_group(node: PhysicalNode, out: dict[int, PhysicalNode]) -> dict[int, PhysicalNode]:
    out.setdefault(node.group, node)
    if isinstance(node, OperatorNode):
        for child in node.children:
            _physical_by_group(child, out)
    return out


def _gaps(node: PhysicalNode | None) -> tuple[Gap, ...]:
    if isinstance(node, ScanNode):
        return node.planned_gaps
    if isinstance(node, HybridNode):
        return tuple(g for leg in node.legs for g in leg.planned_gaps)
    if isinstance(node, UnsatisfiableNode):
        return node.gaps
    return ()


def _edges(explain: Explain) -> list[tuple[str, str]]:
    groups = {g.id: g for g in explain.groups}
    edges: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def visit(node: PhysicalNode) -> None:
        if not isinstance(node, OperatorNode):
            return
        for child in node.children:
            edge = (_chosen_box(groups[node.group]), _chosen_box(groups[child.group]))
            if edge not in seen:
                seen.add(edge)
                edges.append(edge)
            visit(child)

    visit(explain.physical)
    return edges


def _group_title(group: Group) -> str:
    return f"G{group.id} {group.logical}: {group.kind} (required {group.required.value})"


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_dot(explain: Explain) -> str:
    """A Graphviz ``digraph``: ``dot -Tsvg`` draws it."""
    physical = _physical_by_group(explain.physical, {})
    lines = [
        "digraph plan {",
        "  rankdir=TB;",
        '  node [shape=box, fontname="monospace", fontsize=10];',
        f'  label="physical {_dot_text(explain.fingerprints.physical)}"; labelloc=t;',
    ]
    for group in explain.groups:
        lines.append(f"  subgraph cluster_G{group.id} {{")
        lines.append(f'    label="{_dot_text(_group_title(group))}";')
        for box in _boxes(group):
            label = "\\n".join(_dot_text(part) for part in box.label)
            style = (
                'style="bold,filled", fillcolor="#dde8ff"'
                if box.chosen
                else 'style=dashed, color="#b0b0b0", fontcolor="#909090"'
            )
            lines.append(f'    {box.id} [label="{label}", {style}];')
        lines.append("  }")
        for index, gap in enumerate(_gaps(physical.get(group.id))):
            gap_id = f"G{group.id}_gap{index}"
            text = _dot_text(f"gap {gap.kind.value}: {_short(gap.detail)}")
            lines.append(f'  {gap_id} [shape=note, color="#c00000", fontcolor="#c00000", label="{text}"];')
            lines.append(f'  {_chosen_box(group)} -> {gap_id} [style=dotted, color="#c00000", arrowhead=none];')
    for parent, child in _edges(explain):
        lines.append(f"  {parent} -> {child} [penwidth=2];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def render_mermaid(explain: Explain) -> str:
    """A Mermaid ``flowchart``: GitHub, GitLab and MkDocs (with a Mermaid plugin) draw it."""
    physical = _physical_by_group(explain.physical, {})
    lines = ["flowchart TB"]
    styled: list[tuple[str, str]] = []
    for group in explain.groups:
        lines.append(f'  subgraph G{group.id}["{_mermaid_text(_group_title(group))}"]')
        for box in _boxes(group):
            label = "<br/>".join(_mermaid_text(part) for part in box.label)
            lines.append(f'    {box.id}["{label}"]')
            styled.append((box.id, "chosen" if box.chosen else "rejected"))
        lines.append("  end")
        for index, gap in enumerate(_gaps(physical.get(group.id))):
            gap_id = f"G{group.id}_gap{index}"
            text = _mermaid_text(f"gap {gap.kind.value}: {_short(gap.detail)}")
            lines.append(f'  {gap_id}>"{text}"]')
            lines.append(f"  {_chosen_box(group)} -.- {gap_id}")
            styled.append((gap_id, "gap"))
    for parent, child in _edges(explain):
        lines.append(f"  {parent} ==> {child}")
    lines += [
        "  classDef chosen fill:#dde8ff,stroke:#1f3d99,stroke-width:2px",
        "  classDef rejected fill:#f7f7f7,stroke:#b0b0b0,color:#909090,stroke-dasharray:4 3",
        "  classDef gap fill:#fff0f0,stroke:#c00000,color:#c00000",
    ]
    for kind in ("chosen", "rejected", "gap"):
        ids = [i for i, k in styled if k == kind]
        if ids:
            lines.append(f"  class {','.join(ids)} {kind}")
    return "\n".join(lines) + "\n"
