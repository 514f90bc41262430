"""Which files of a folder are documents, in which format, and the text each format indexes.

- Markdown (``.md``, ``.markdown``): chunked at ``##`` headings; its YAML front matter
  (``parse_front_matter``) holds the document's id, title and metadata.
- Plain text: ``.txt``, ``.text``, a file without an extension (``README``, ``NEWS``), and a
  file named like package documentation whatever follows the first dot (``README.Debian``,
  ``changelog.Debian``, ``copyright``): chunked at blank lines.
- reStructuredText (``.rst``): chunked at blank lines; the title is the first underlined line.
- HTML (``.html``, ``.htm``): read with the standard library's HTML parser. Its text keeps the
  file's lines and characters where they are: markup (tags, comments, declarations, and the
  content of ``<script>`` and ``<style>``) becomes spaces, line breaks stay, an entity becomes
  the character it names padded with spaces to its own length. A chunk's line span and
  character offsets are therefore those of the HTML file itself, and ``race verify`` checks a
  citation against the same text view of the file as it is now.

Every other file is an ``unsupported type`` and is counted, not read.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Any, Literal

from rsc import CorpusError

DocumentKind = Literal["markdown", "text", "rst", "html"]

_SUFFIXES: dict[str, DocumentKind] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".rst": "rst",
    ".html": "html",
    ".htm": "html",
}
DOC_NAMES = frozenset(
    {
        "authors",
        "bugs",
        "changelog",
        "changes",
        "contributors",
        "copying",
        "copyright",
        "faq",
        "history",
        "install",
        "license",
        "licence",
        "news",
        "notice",
        "readme",
        "thanks",
        "todo",
    }
)
"""File names (before the first dot, any case) that are plain-text documentation whatever
their extension, unless it names a compressed or binary format."""
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""The characters ``str.splitlines`` breaks lines at."""
_NOT_TEXT = frozenset({".gz", ".bz2", ".xz", ".zst", ".zip", ".z", ".lz", ".pdf", ".png", ".jpg", ".gif", ".svg"})


def document_kind(name: str) -> DocumentKind | None:
    """The format a file's name says it holds, or ``None`` (not a document)."""
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if not suffix or (name.startswith(".") and name.count(".") == 1):
        return None if name.startswith(".") else "text"
    if name.split(".", 1)[0].lower() in DOC_NAMES and suffix not in _NOT_TEXT:
        return "text"
    return None


class _TextView(HTMLParser):
    """Collects where the text of an HTML document is: (offset, text) pieces."""

    def __init__(self, line_starts: list[int]) -> None:
        super().__init__(convert_charrefs=False)
        self.line_starts = line_starts
        self.pieces: list[tuple[int, str, bool]] = []  # offset, text, inside <pre>
        self.hidden = 0  # inside <script> or <style>
        self.pre = 0  # inside <pre>
        self.title: list[str] = []
        self.in_title = False

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self.hidden += 1
        self.pre += tag == "pre"
        self.in_title = self.in_title or tag == "title"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self.hidden = max(0, self.hidden - 1)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag == "title":
            self.in_title = False

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.pieces.append((self._offset(), data, self.pre > 0))
            if self.in_title:
                self.title.append(data)

    def _reference(self, raw: str) -> None:
        if self.hidden:
            return
        char = html.unescape(raw)
        if len(char) <= len(raw):
            # The rest of the reference's length stays blank, as markup is.
            self.pieces.append((self._offset(), char, self.pre > 0))
            if self.in_title:
                self.title.append(char)

    def handle_entityref(self, name: str) -> None:
        self._reference(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self._reference(f"&#{name};")


def _parsed(source: str) -> _TextView:
    # The parser counts lines at "\n" only; the chunker's lines break wherever str.splitlines
    # does, and every such character is kept so that both see the file's own lines.
    line_starts = [0]
    for row in source.split("\n"):
        line_starts.append(line_starts[-1] + len(row) + 1)
    view = _TextView(line_starts)
    view.feed(source)
    view.close()
    return view


def html_text(source: str) -> tuple[str, str]:
    """The text view of an HTML document (module docstring: same length, same lines) and its
    ``<title>``, whitespace collapsed (``""`` when it has none)."""
    view = _parsed(source)
    out = [ch if ch in LINE_BREAKS else " " for ch in source]
    for offset, piece, _ in view.pieces:
        for i, ch in enumerate(piece):
            at = offset + i
            if at < len(out) and source[at] not in LINE_BREAKS:
                out[at] = " " if ch in LINE_BREAKS else ch
    return "".join(out), " ".join("".join(view.title).split())


_MARKUP = "\x00"  # where markup stood between two pieces of text; no document holds a NUL
_INLINE = frozenset(
    [
        "a",
        "abbr",
        "acronym",
        "b",
        "bdi",
        "bdo",
        "big",
        "cite",
        "code",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "img",
        "ins",
        "kbd",
        "label",
        "mark",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
        "var",
        "wbr",
    ]
)
"""Elements that sit inside a line of text: their tags part no words (``<b>w</b>ord`` is ``word``)."""
_TAG_NAME = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)")


def _parts_words(source: str, at: int) -> bool:
    """Whether the markup starting at ``source[at]`` (a ``<``) stands between words, as a block
    element's tag, a line break or a doctype does; an inline element's tag or a comment does not."""
    tag = _TAG_NAME.match(source, at)
    if tag is None:
        return not source.startswith("<!--", at)
    return tag.group(1).lower() not in _INLINE


def html_shown(source: str) -> list[str]:
    """The lines of an HTML document as a reader sees them, one for each of the file's lines
    (``html_text(source)[0].splitlines(keepends=True)``, a line span's lines): markup that stood
    between words (a block element's tag, not a ``<b>`` or a comment) is one space (none where it
    pads a character reference), and outside
    ``<pre>`` white space is collapsed, one space between words and none at a line's ends."""
    view = _parsed(source)
    text: list[str | None] = [None] * len(source)  # the document's text at each offset; None: markup
    pre = [False] * len(source)
    for offset, piece, in_pre in view.pieces:
        for i, letter in enumerate(piece):
            if offset + i < len(source):
                text[offset + i], pre[offset + i] = letter, in_pre
    lines: list[str] = []
    body: list[str] = []
    keep = False  # the line holds text of a <pre>: its white space is kept

    def line() -> str:
        joined = "".join(body)
        return joined.replace(_MARKUP, "") if keep else " ".join(joined.replace(_MARKUP, " ").split())

    for at, ch in enumerate(source):
        if ch in LINE_BREAKS:
            if ch == "\r" and source[at + 1 : at + 2] == "\n":
                continue  # "\r\n" is one line break, ended by its "\n"
            lines.append(line() + ("\r\n" if ch == "\n" and source[at - 1 : at] == "\r" else ch))
            body, keep = [], False
        elif (char := text[at]) is not None:
            body.append(" " if char in LINE_BREAKS else char)
            keep = keep or pre[at]
        elif ch == "<" and (not body or body[-1] != _MARKUP) and _parts_words(source, at):
            body.append(_MARKUP)  # a run of markup parting words: one mark; a reference's blank rest: none
    if source and source[-1] not in LINE_BREAKS:
        lines.append(line())  # the last line, without a line break
    return lines


def rst_title(lines: list[str]) -> str:
    """The first section title of a reStructuredText document: a line underlined (and perhaps
    overlined) by one punctuation character repeated at least as long as the title."""
    for i in range(len(lines) - 1):
        text, under = lines[i].strip(), lines[i + 1].strip()
        if text and under and len(set(under)) == 1 and under[0] in "=-~*^#+`:'\"._" and len(under) >= len(text):
            if len(set(text)) == 1 and text[0] == under[0]:
                continue  # an overline: the title is the next line
            return text
    return ""


def parse_front_matter(lines: list[str], where: str) -> tuple[dict[str, Any], dict[str, int], int]:
    """YAML front matter (every scalar a string: types are the schema's), the 1-based line of
    each key, and the index of the first body line."""
    if not lines or lines[0].strip() != "---":
        return {}, {}, 0
    close = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if close is None:
        raise CorpusError("front matter opened with '---' is never closed", where=where)
    block = "".join(lines[1:close])
    # Imported here: a run that reads an index (and verifies HTML citations through this
    # module) never parses front matter, and PyYAML is a cold start's cost it need not pay.
    import yaml

    try:
        node = yaml.compose(block, Loader=yaml.BaseLoader)
        data = yaml.load(block, Loader=yaml.BaseLoader) if node is not None else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 2}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise CorpusError(f"{line}front matter is not YAML ({problem})", where=where) from None
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode | type(None)):
        raise CorpusError("line 2: front matter must be a YAML mapping of 'key: value'", where=where)
    key_lines = {str(k.value): k.start_mark.line + 2 for k, _ in node.value} if node is not None else {}
    return data, key_lines, close + 1
