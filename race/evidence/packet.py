"""Context packets: a receipt's evidence handed to a reader within a budget.

A packet quotes literal source spans, read back from the corpus files through each hit's
custody (path and line span) — never the text a backend returned, never generated text. A
span whose citation no longer holds (``race.evidence.verify``) is not quoted; the packet says so.

What goes in, in order, until the budget is spent:

- the receipt's obligations and operators with their status and coverage, and every gap of
  the receipt, each with an id (these always fit, or the budget is refused as too small);
- passages taken alternately from the supporting and the opposing (refuting, conflicting)
  evidence, and stale evidence after them, so that a refutation stands beside the support it
  answers; within each side, one passage per origin component per round (documents joined by
  ``derived_from`` edges of the corpus are one origin), so one origin cannot crowd out the
  others. A passage that does not fit is skipped, and a smaller one later may still fit;
- then, from an origin not yet quoted, an item too long for what is left: its first lines,
  as many as fit (at least one), cut at a line boundary; its citation names the lines kept
  and the packet says it was shortened and from which span;
- next to each passage: its role, status, citation (path, lines, characters, sha256, chunk,
  contracts), the obligations and operators that placed it, and the ids of the gaps that
  qualify it;
- what was left out, by count and rank.

Budgets are exact: the rendered text is at most ``max_chars`` characters and, with
``max_tokens``, at most that many tokens of the named tokenizer (``all-MiniLM-L6-v2``'s
WordPiece by default; where that tokenizer is not installed, an estimate of one token per
four characters, marked ``tokens_approximate``). Corpus text sits between fences longer
than any run of backticks inside it, under a line that says it is quoted data. The same
receipt, corpus and budget give the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from race.evidence.packet_text import (
    PACKET_SCHEMA_VERSION,
    Citation,
    Handle,
    Omission,
    Packet,
    PacketGap,
    Passage,
    Role,
    handles_of,
    head_lines,
    packet_fingerprint,
    packet_gaps,
    passage_lines,
    tail_lines,
)
from race.evidence.verify import SourceFile, check_hit
from race.receipt import EvidenceItem, Fusion, Receipt
from rsc import EvidenceStatus, InputError

DEFAULT_TOKENIZER = "all-MiniLM-L6-v2"
APPROXIMATE_TOKENIZER = "chars/4"
_ROLE: dict[EvidenceStatus, Role] = {
    EvidenceStatus.CANDIDATE_REFUTATION: "refutes",
    EvidenceStatus.CONFLICTING_EVIDENCE: "conflicts",
    EvidenceStatus.STALE_EVIDENCE: "stale",
}
__all__ = [
    "PACKET_SCHEMA_VERSION",
    "Citation",
    "Handle",
    "Omission",
    "Packet",
    "PacketGap",
    "Passage",
    "TokenCounter",
    "build_packet",
    "origin_components",
    "token_counter",
]


@dataclass(frozen=True)
class TokenCounter:
    name: str
    approximate: bool
    count: Callable[[str], int]


def token_counter(name: str = DEFAULT_TOKENIZER) -> TokenCounter:
    """The named tokenizer, or the marked estimate where it is not installed."""
    if name == APPROXIMATE_TOKENIZER:
        return TokenCounter(name, True, lambda text: math.ceil(len(text) / 4))
    if name != DEFAULT_TOKENIZER:
        raise InputError(
            f"unknown tokenizer {name!r} (use {DEFAULT_TOKENIZER} or {APPROXIMATE_TOKENIZER})", where="--tokenizer"
        )
    from backends.models.embedding import default_model_dir

    model = default_model_dir()
    if model is None or not (model / "tokenizer.json").is_file():
        return TokenCounter(APPROXIMATE_TOKENIZER, True, lambda text: math.ceil(len(text) / 4))
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return TokenCounter(f"{name} WordPiece", False, count)


def origin_components(corpus: Path) -> dict[str, str]:
    """Document id -> its origin component (the smallest id joined to it by a relation the
    corpus schema gives the ``derived_from`` role)."""
    from backends.ingest.schema import RelationRole, load_schema

    lineage = set(load_schema(corpus).relations_with(RelationRole.DERIVED_FROM))
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    edges = corpus / "edges.jsonl" if corpus.is_dir() else corpus.with_name(corpus.stem + ".edges.jsonl")
    if not corpus.is_dir() and not edges.is_file():
        edges = corpus.parent / "edges.jsonl"
    if edges.is_file():
        for line in edges.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            edge = json.loads(line)
            if edge.get("relation") in lineage:
                a, b = find(str(edge["src"])), find(str(edge["dst"]))
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return {doc: find(doc) for doc in list(parent)}


@dataclass(frozen=True)
class _Candidate:
    item: EvidenceItem
    role: Role
    origin: str
    placed_by: tuple[str, ...]


def _fusion_nodes(fusion: Fusion) -> list[str]:
    nodes = [fusion.node] if fusion.node else []
    for inner in fusion.inputs:
        nodes += _fusion_nodes(inner)
    return nodes


def _diverse(candidates: Sequence[_Candidate]) -> list[_Candidate]:
    """Round-robin over origin components: each component's best first, then its second…"""
    seen: dict[str, int] = {}
    first_rank: dict[str, int] = {}
    keyed = []
    for c in sorted(candidates, key=lambda c: c.item.rank):
        turn = seen.get(c.origin, 0)
        seen[c.origin] = turn + 1
        first_rank.setdefault(c.origin, c.item.rank)
        keyed.append(((turn, first_rank[c.origin], c.item.rank), c))
    return [c for _, c in sorted(keyed, key=lambda kc: kc[0])]


def _first_per_obligation(receipt: Receipt, order: Sequence[_Candidate]) -> list[_Candidate]:
    """Each obligation's best item first (from an origin not yet used where it has one), then the rest."""
    first: list[_Candidate] = []
    for ob in receipt.obligations:
        mine = [c for c in order if ob.id in c.item.obligations and c not in first]
        if not mine:
            continue
        used = {c.origin for c in first}
        best = min(mine, key=lambda c: (c.origin in used, c.item.rank))
        first.append(best)
    return first + [c for c in order if c not in first]


def _interleave(*sides: list[_Candidate]) -> list[_Candidate]:
    out: list[_Candidate] = []
    for i in range(max((len(s) for s in sides), default=0)):
        out += [s[i] for s in sides if i < len(s)]
    return out


def shortened(p: Passage, lines: int, exact: str) -> Passage:
    """``p`` quoting only its first ``lines`` lines, its citation narrowed to them (``exact``:
    the cited lines as the index read them, which an HTML passage does not show)."""
    c = p.citation
    text = "".join(p.text.splitlines(keepends=True)[:lines])
    kept = "".join(exact.splitlines(keepends=True)[:lines])
    char_end = None if c.char_start is None else c.char_start + len(kept.rstrip("\n"))
    citation = c.model_copy(update={"line_end": c.line_start + lines - 1, "char_end": char_end})
    return p.model_copy(update={"text": text, "citation": citation, "shortened_from": c.line_end})


def _longest_prefix(p: Passage, fits: Callable[[Passage], bool], exact: str) -> Passage | None:
    """The passage of ``p``'s first lines, as many as ``fits`` allows (at least one), by
    bisection over the line count; ``None`` when not even its first line fits."""
    low, high = 0, p.citation.line_end - p.citation.line_start  # every count <= low fits; > high does not
    if not fits(shortened(p, 1, exact)):
        return None
    low = 1
    while low < high:
        mid = (low + high + 1) // 2
        if fits(shortened(p, mid, exact)):
            low = mid
        else:
            high = mid - 1
    return shortened(p, low, exact)


def build_packet(
    receipt: Receipt,
    corpus: Path,
    *,
    max_chars: int,
    max_tokens: int | None = None,
    tokenizer: str = DEFAULT_TOKENIZER,
) -> Packet:
    """The packet of ``receipt`` over the files of ``corpus`` within the budgets."""
    if max_chars < 1 or (max_tokens is not None and max_tokens < 1):
        raise InputError("budgets must be positive", where="--max-chars" if max_chars < 1 else "--max-tokens")
    counter = token_counter(tokenizer)
    fingerprint = receipt.fingerprints.evidence or receipt.fingerprints.plan
    gaps = packet_gaps(receipt)
    origins = origin_components(corpus)
    sources: dict[str, SourceFile] = {}
    candidates: list[_Candidate] = []
    broken: list[Omission] = []
    quoted: dict[str, str] = {}
    exact: dict[str, str] = {}
    for item in receipt.evidence:
        hit = item.hits[0]
        path = hit.custody.source_path or ""
        if path not in sources:
            sources[path] = SourceFile(corpus if corpus.is_dir() else corpus.parent, path)
        source = sources[path]
        check = check_hit(hit, source, evidence=item.key, position=0)
        cust = hit.custody
        if check.status != "valid" or cust.line_start is None or cust.line_end is None:
            broken.append(Omission(evidence=item.key, rank=item.rank, reason="citation_broken", detail=check.status))
            continue
        exact[item.key] = source.text[source.offsets[cust.line_start - 1] : source.offsets[cust.line_end]]
        # An HTML passage is shown as a reader sees it; its citation is the file's own span.
        shown = "".join(source.shown[cust.line_start - 1 : cust.line_end])
        quoted[item.key] = shown if source.shown else exact[item.key]
        placed = tuple(dict.fromkeys([*item.obligations, *_fusion_nodes(item.fusion)]))
        origin = item.origin or origins.get(hit.doc_id, hit.doc_id)
        candidates.append(_Candidate(item, _ROLE.get(item.status, "support"), origin, placed))
    rest = _interleave(
        _diverse([c for c in candidates if c.role == "support"]),
        _diverse([c for c in candidates if c.role in ("refutes", "conflicts")]),
        _diverse([c for c in candidates if c.role == "stale"]),
    )
    order = _first_per_obligation(receipt, rest)
    head = head_lines(receipt, gaps, fingerprint)
    chosen: list[Passage] = []

    def passage(c: _Candidate, n: int) -> Passage:
        hit = c.item.hits[0].custody
        return Passage(
            id=f"P{n}",
            handle=n,
            evidence=c.item.key,
            rank=c.item.rank,
            role=c.role,
            status=c.item.status,
            origin=c.origin,
            placed_by=c.placed_by,
            gaps=tuple(g.id for g in gaps if g.node in c.placed_by),
            citation=Citation(
                source_path=hit.source_path,
                line_start=hit.line_start,
                line_end=hit.line_end,
                char_start=hit.char_start,
                char_end=hit.char_end,
                source_hash=hit.source_hash,
                chunk_id=hit.chunk_id,
                contracts=tuple(sorted({h.custody.rsc for h in c.item.hits})),
            ),
            text=quoted[c.item.key],
        )

    def omitted(taken: Sequence[Passage]) -> list[Omission]:
        keys = {p.evidence for p in taken}
        left = [
            Omission(evidence=c.item.key, rank=c.item.rank, reason="budget") for c in order if c.item.key not in keys
        ]
        return sorted(left + broken, key=lambda o: o.rank)

    def render(taken: Sequence[Passage]) -> str:
        lines = list(head)
        for p in taken:
            lines += passage_lines(p)
        if not taken:
            lines += ["none within the budget", ""]
        return "\n".join(lines + tail_lines(omitted(taken))) + "\n"

    def fits(text: str) -> bool:
        return len(text) <= max_chars and (max_tokens is None or counter.count(text) <= max_tokens)

    text = render(chosen)
    if not fits(text):
        raise InputError(
            f"the budget cannot hold the receipt's obligations and its {len(gaps)} gaps "
            f"({len(text)} characters, {counter.count(text)} tokens needed)",
            where="--max-chars",
        )
    for c in order:
        trial = render([*chosen, passage(c, len(chosen) + 1)])
        if fits(trial):
            chosen.append(passage(c, len(chosen) + 1))
            text = trial
    # Then an item the budget cannot hold whole, from an origin not yet quoted, is quoted by its
    # first lines: the most that fit, at least one, the kept span cited and the shortening stated.
    for c in order:
        if c.item.key in {p.evidence for p in chosen} or c.origin in {p.origin for p in chosen}:
            continue
        whole = passage(c, len(chosen) + 1)
        kept = _longest_prefix(whole, lambda p: fits(render([*chosen, p])), exact[c.item.key])
        if kept is not None:
            chosen.append(kept)
            text = render(chosen)
    packet = Packet(
        receipt=fingerprint,
        max_chars=max_chars,
        max_tokens=max_tokens,
        tokenizer=counter.name,
        tokens_approximate=counter.approximate,
        chars=len(text),
        quoted_chars=sum(len(p.text) for p in chosen),
        tokens=counter.count(text),
        gaps=gaps,
        passages=tuple(chosen),
        handles=handles_of(chosen),
        omitted=tuple(omitted(chosen)),
        text=text,
        fingerprint="",
    )
    return packet.model_copy(update={"fingerprint": packet_fingerprint(packet)})
