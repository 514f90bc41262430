"""Cutting a document body into chunks: sections by markdown structure, then windows that fit
the embedder.

Sections start at ``##`` headings as markdown-it-py parses them, so a ``## `` line inside a
code fence is code, not a heading; a section longer than ``MAX_SECTION_LINES`` is split at a
blank line outside any code fence. When a token counter is given (the embedder's own
tokenizer), every piece whose embedded text (title, heading and body, as the vector index
embeds it) has more tokens than the model reads is cut into windows that fit, each overlapping
the previous one by up to ``overlap`` tokens of whole lines; a single line too long for one
window is cut inside the line, at token boundaries. Every window keeps its exact line span and
character offsets, so no text is silently left out of the embeddings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

MAX_SECTION_LINES = 40
TEXT_PARAGRAPH_LINES = 15
DEFAULT_OVERLAP_TOKENS = 32


@dataclass(frozen=True)
class TokenCounter:
    """The embedder's tokenizer as the chunker needs it: token offsets of a text, and how many
    tokens the model reads (special tokens included)."""

    offsets: Callable[[str], list[tuple[int, int]]]
    """Character (start, end) of every token of a text, special tokens left out."""
    max_tokens: int
    specials: int = 2
    """Tokens the model adds to every text ([CLS] and [SEP])."""

    def count(self, text: str) -> int:
        return len(self.offsets(text))


@dataclass(frozen=True)
class Piece:
    """One chunk's place in the document: 0-based inclusive lines and, for a piece cut inside
    a line, the character range within the document."""

    first: int
    last: int
    heading: str
    char_start: int | None = None
    char_end: int | None = None


@cache
def _markdown() -> MarkdownIt:
    """The commonmark parser, made at the first markdown body (a query embedding needs no parser)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def _structure(lines: Sequence[str], body_start: int) -> tuple[dict[int, str], set[int], set[int]]:
    """ATX ``##`` headings (line -> text), ``#`` title lines, and lines inside code fences."""
    body = "".join(lines[body_start:])
    headings: dict[int, str] = {}
    titles: set[int] = set()
    fenced: set[int] = set()
    tokens = _markdown().parse(body)
    for n, token in enumerate(tokens):
        if token.map is None:
            continue
        first, end = token.map[0] + body_start, token.map[1] + body_start
        if token.type == "heading_open" and token.markup.startswith("#"):
            text = tokens[n + 1].content.strip() if n + 1 < len(tokens) else ""
            if token.tag == "h2":
                headings[first] = text
            elif token.tag == "h1":
                titles.add(first)
        elif token.type in ("fence", "code_block"):
            fenced.update(range(first, end))
    return headings, titles, fenced


def sections(lines: Sequence[str], body_start: int, markdown: bool) -> list[Piece]:
    """Sections of the body (markdown) or paragraphs (plain text), at most the line limit long."""
    headings, titles, fenced = _structure(lines, body_start) if markdown else ({}, set(), set())
    spans: list[tuple[int, int, str]] = []
    start: int | None = None
    heading = ""

    def close(end: int) -> None:
        nonlocal start
        if start is None:
            return
        while end >= start and not lines[end].strip():
            end -= 1
        if end >= start:
            spans.append((start, end, heading))
        start = None

    for i in range(body_start, len(lines)):
        if i in headings:
            close(i - 1)
            start, heading = i, headings[i]
        elif i in titles and start is None:
            continue
        elif start is None and lines[i].strip():
            start = i
    close(len(lines) - 1)
    limit = MAX_SECTION_LINES if markdown else TEXT_PARAGRAPH_LINES
    return [p for first, last, head in spans for p in _split_long(lines, first, last, head, limit, fenced)]


def _split_long(
    lines: Sequence[str], first: int, last: int, heading: str, limit: int, fenced: set[int]
) -> Iterable[Piece]:
    if last - first + 1 <= limit:
        yield Piece(first, last, heading)
        return
    start = first
    for i in range(first, last + 1):
        if i - start + 1 >= limit and not lines[i].strip() and i not in fenced:
            yield Piece(start, i - 1, heading)
            start = i + 1
            while start <= last and not lines[start].strip():
                start += 1
    if start <= last:
        yield Piece(start, last, heading)


def fit(
    pieces: Sequence[Piece],
    lines: Sequence[str],
    offsets: Sequence[int],
    *,
    title: str,
    counter: TokenCounter,
    overlap: int = DEFAULT_OVERLAP_TOKENS,
) -> list[Piece]:
    """Every piece whose embedded text is longer than the model reads, as windows that fit."""
    out: list[Piece] = []
    for piece in pieces:
        prefix = counter.count(title) + counter.count(piece.heading) + counter.specials
        budget = counter.max_tokens - prefix
        line_tokens = [counter.count(lines[i]) for i in range(piece.first, piece.last + 1)]
        if sum(line_tokens) <= budget:
            out.append(piece)
            continue
        if budget < 1:
            # Title and heading alone fill the model: nothing can be fitted; the index counts it.
            out.append(piece)
            continue
        out += _windows(piece, line_tokens, lines, offsets, budget, min(overlap, budget // 2), counter)
    return out


def _windows(
    piece: Piece,
    line_tokens: list[int],
    lines: Sequence[str],
    offsets: Sequence[int],
    budget: int,
    overlap: int,
    counter: TokenCounter,
) -> list[Piece]:
    windows: list[Piece] = []
    i = piece.first
    while i <= piece.last:
        if line_tokens[i - piece.first] > budget:
            windows += _inside_line(piece.heading, i, lines, offsets, budget, overlap, counter)
            i += 1
            continue
        used, j = 0, i
        while j <= piece.last and used + line_tokens[j - piece.first] <= budget:
            used += line_tokens[j - piece.first]
            j += 1
        last = j - 1
        while last > i and not lines[last].strip():
            last -= 1
        windows.append(Piece(i, last, piece.heading))
        if j > piece.last:
            break
        # The next window repeats whole trailing lines worth at most `overlap` tokens.
        back, k = 0, j
        while k - 1 > i and back + line_tokens[k - 1 - piece.first] <= overlap:
            k -= 1
            back += line_tokens[k - piece.first]
        i = k
        while i <= piece.last and not lines[i].strip():
            i += 1
    return windows


def _inside_line(
    heading: str,
    line: int,
    lines: Sequence[str],
    offsets: Sequence[int],
    budget: int,
    overlap: int,
    counter: TokenCounter,
) -> list[Piece]:
    """One line too long for a window, cut at token boundaries (character offsets exact)."""
    text = lines[line].rstrip("\n")
    spans = counter.offsets(text)
    windows: list[Piece] = []
    start = 0
    while start < len(spans):
        size = min(budget, len(spans) - start)
        begin = 0 if start == 0 else spans[start][0]
        while True:
            final = start + size >= len(spans)
            end = len(text) if final else spans[start + size - 1][1]
            # A cut inside a word re-tokenizes its tail: shrink until the window really fits.
            if size == 1 or counter.count(text[begin:end]) <= budget:
                break
            size -= 1
        windows.append(Piece(line, line, heading, offsets[line] + begin, offsets[line] + end))
        if start + size >= len(spans):
            break
        start += max(1, size - min(overlap, size // 2))
    return windows
