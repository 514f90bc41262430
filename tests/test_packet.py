"""`race context`: literal, cited, budgeted packets of a receipt's evidence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from race.cli.main import main
from race.cli.render import receipt_json
from race.engine import Engine
from race.evidence.packet import Packet, build_packet, token_counter
from race.evidence.packet_text import passage_lines
from race.indexing.bundled import BUNDLED_CORPUS, SHOWCASE_PLAN
from race.receipt import Receipt
from rsc import InputError
from tests.conftest import FIXTURES, roomy_plan


@pytest.fixture(scope="module")
def showcase(session_engine: Engine) -> Receipt:
    return session_engine.run_sync(roomy_plan(SHOWCASE_PLAN))


@pytest.fixture(scope="module")
def with_gaps(session_engine: Engine) -> Receipt:
    receipt = session_engine.run_sync(FIXTURES / "plans" / "postfilter_heuristic.json")
    assert receipt.gaps or any(o.gaps for o in receipt.obligations)
    return receipt


def _source_lines(passage_path: str, first: int, last: int) -> str:
    lines = (BUNDLED_CORPUS / passage_path).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[first - 1 : last])


def _assert_literal(packet: Packet) -> None:
    for p in packet.passages:
        c = p.citation
        assert p.text == _source_lines(c.source_path, c.line_start, c.line_end)
        assert p.text in packet.text
        assert c.source_path in packet.text and c.source_hash in packet.text and c.chunk_id in packet.text


def _all_gaps(receipt: Receipt) -> set[tuple[str, str, str]]:
    found = [
        *receipt.gaps,
        *(g for o in receipt.obligations for g in o.gaps),
        *(g for o in receipt.operators for g in o.gaps),
    ]
    return {(g.kind.value, g.obligation, g.detail) for g in found}


def test_showcase_within_4000_characters_quotes_source_lines_byte_for_byte(showcase: Receipt) -> None:
    packet = build_packet(showcase, BUNDLED_CORPUS, max_chars=4000)
    assert packet.chars == len(packet.text) <= 4000
    assert len(packet.passages) >= 3
    _assert_literal(packet)
    # Support and refutation side by side, from more than one origin.
    assert {"support", "refutes"} <= {p.role for p in packet.passages}
    assert len({p.origin for p in packet.passages}) == len(packet.passages)
    # The showcase receipt has no gaps, and the packet says so; every obligation is stated.
    assert _all_gaps(showcase) == set() and "the receipt records no gap" in packet.text
    for ob in showcase.obligations:
        assert f"- {ob.id} ({ob.kind.value}" in packet.text
    left = {o.rank for o in packet.omitted}
    assert left | {p.rank for p in packet.passages} == {e.rank for e in showcase.evidence}


def test_every_gap_is_stated_and_referenced_beside_the_passages_it_qualifies(with_gaps: Receipt) -> None:
    packet = build_packet(with_gaps, BUNDLED_CORPUS, max_chars=4000)
    _assert_literal(packet)
    assert {(g.kind, g.node, g.detail) for g in packet.gaps} == _all_gaps(with_gaps)
    for g in packet.gaps:
        assert f"{g.id} {g.kind} ({g.severity}) on {g.node}" in packet.text and g.detail in packet.text
    for p in packet.passages:
        expected = tuple(g.id for g in packet.gaps if g.node in p.placed_by)
        assert p.gaps == expected
        assert f"gaps {', '.join(expected) or 'none'}" in packet.text


def test_budgets_are_exact_and_bytes_deterministic(showcase: Receipt) -> None:
    counter = token_counter()
    assert not counter.approximate
    for chars, tokens in ((2500, None), (4000, 900), (12000, 2000)):
        packet = build_packet(showcase, BUNDLED_CORPUS, max_chars=chars, max_tokens=tokens)
        assert len(packet.text) <= chars and packet.tokens == counter.count(packet.text)
        assert tokens is None or packet.tokens <= tokens
        assert build_packet(showcase, BUNDLED_CORPUS, max_chars=chars, max_tokens=tokens) == packet
    wider = build_packet(showcase, BUNDLED_CORPUS, max_chars=12000)
    assert len(wider.passages) > len(build_packet(showcase, BUNDLED_CORPUS, max_chars=4000).passages)
    approx = build_packet(showcase, BUNDLED_CORPUS, max_chars=4000, max_tokens=800, tokenizer="chars/4")
    assert approx.tokens_approximate and approx.tokens <= 800
    with pytest.raises(InputError, match="cannot hold"):
        build_packet(showcase, BUNDLED_CORPUS, max_chars=300)


def test_corpus_text_is_fenced_as_data(showcase: Receipt, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(BUNDLED_CORPUS, corpus)
    packet = build_packet(showcase, corpus, max_chars=20000)
    injected = next(p for p in packet.passages if "SYSTEM:" in p.text or "ignore" in p.text.lower())
    fence = "````"
    before, _, after = packet.text.partition(injected.text)
    assert before.endswith(fence + "quoted-data\n") and after.startswith(fence)
    assert "not instructions" in packet.text


def test_a_citation_that_no_longer_holds_is_not_quoted(showcase: Receipt, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(BUNDLED_CORPUS, corpus)
    first = build_packet(showcase, corpus, max_chars=4000).passages[0]
    path = corpus / first.citation.source_path
    path.write_text(path.read_text().replace(first.text, "rewritten\n"))
    again = build_packet(showcase, corpus, max_chars=4000)
    assert first.evidence not in {p.evidence for p in again.passages}
    assert any(o.evidence == first.evidence and o.reason == "citation_broken" for o in again.omitted)
    assert "citation no longer holds (changed)" in again.text


def test_cli_prints_the_packet_text_or_json(
    showcase: Receipt, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "receipt.json"
    saved.write_text(receipt_json(showcase))
    assert main(["context", str(saved), "--max-chars", "4000"]) == 0
    text = capsys.readouterr().out
    assert text == build_packet(showcase, BUNDLED_CORPUS, max_chars=4000).text
    assert main(["context", str(saved), "--max-chars", "4000", "--max-tokens", "1000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == "race.packet/1" and data["tokens"] <= 1000
    assert main(["context", str(saved), "--max-chars", "10"]) == 2


def _one_file_run(tmp_path: Path, name: str, text: str, query: str) -> tuple[Path, Receipt]:
    """A corpus of one file, its lexical index, and the receipt of one lexical obligation, whose
    citations hold."""
    from race.evidence.verify import verify_receipt
    from race.indexing.indexing import build_index

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / name).write_text(text, encoding="utf-8")
    build_index(corpus, tmp_path / "index", vectors=False)
    plan = {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [{"id": "o", "kind": "seek_support", "query": {"text": query}, "query_class": "lexical"}],
    }
    with Engine.open(tmp_path / "index") as engine:
        receipt = engine.run_sync(plan)
    assert receipt.evidence and verify_receipt(receipt, corpus).holds
    return corpus, receipt


def test_a_passage_too_long_for_the_budget_is_shortened_at_lines_and_says_so(tmp_path: Path) -> None:
    """On real text (argparse's own module docstring, one long section), a budget that holds the
    header but no whole passage quotes the first lines that fit, cites exactly those lines, and
    says the hit cited more: never a packet of 0 passages while some lines would fit."""
    import argparse
    import textwrap

    body = "\n".join(textwrap.wrap(" ".join(str(argparse.__doc__).split()), 72))
    corpus, receipt = _one_file_run(tmp_path, "argparse.md", f"# argparse\n\n## Overview\n\n{body}\n", "ArgumentParser")
    whole = build_packet(receipt, corpus, max_chars=100_000)
    longest = max(whole.passages, key=lambda p: len(p.text))
    header = len(whole.text) - sum(len("\n".join(passage_lines(p))) + 1 for p in whole.passages)
    budget = header + len(longest.text) // 2
    packet = build_packet(receipt, corpus, max_chars=budget)
    assert len(packet.text) <= budget and packet.passages
    cut = [p for p in packet.passages if p.shortened_from is not None]
    assert cut, "no passage was shortened"
    for p in cut:
        c = p.citation
        source = (corpus / c.source_path).read_text(encoding="utf-8").splitlines(keepends=True)
        assert p.text == "".join(source[c.line_start - 1 : c.line_end])
        assert p.shortened_from is not None and c.line_end < p.shortened_from
        assert f"shortened to fit the budget: the hit cites lines {c.line_start}-{p.shortened_from}" in packet.text
        assert c.char_start is not None and c.char_end is not None
        assert "".join(source)[c.char_start : c.char_end] == p.text.rstrip("\n")
    assert packet.quoted_chars == sum(len(p.text) for p in packet.passages) > 0
    assert build_packet(receipt, corpus, max_chars=budget) == packet


def _html_page() -> str:
    """A page as texinfo and Sphinx write them, around real text (textwrap's docstrings): a
    navigation line of links, a heading, paragraphs with character references, and a <pre>
    example whose indentation and references are its own."""
    import html
    import textwrap

    words = " ".join(str(textwrap.__doc__).split()) + " " + " ".join(str(textwrap.wrap.__doc__).split())
    body = html.escape("\n".join(textwrap.wrap(words, 70)))
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n<title>textwrap &amp; friends</title>\n"
        '<style type="text/css">\npre.example {margin-left: 3.2em}\n</style>\n</head>\n<body>\n'
        '<div class="header">\n<p>\nNext: <a href="fill.html" accesskey="n" rel="next">fill</a>, '
        'Previous: <a href="intro.html" accesskey="p" rel="prev">Intro</a> &nbsp; '
        '[<a href="index.html">Index</a>]</p>\n'
        "</div>\n"
        '<h2 class="chapter" id="wrap">2 Wrapping <code>text</code></h2>\n\n'
        f"<p>{body}</p>\n"
        '<pre class="example">\nfor line in wrap(text, width=40):\n    if len(line) &lt; 40:\n'
        '        print(line)  <span class="c"># short &amp; sweet</span>\n</pre>\n'
        "</body>\n</html>\n"
    )


def test_an_html_passage_is_shown_as_a_reader_sees_it_and_cited_as_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Markup becomes one space between words, not a run of blanks; white space is collapsed
    outside <pre> and kept inside; the citation is the file's own lines and characters, which
    `race verify` and `race cite` read again, also for a passage shortened to fit."""
    from backends.ingest.formats import html_shown, html_text
    from race.evidence.cite import cite_answer

    page = _html_page()
    corpus, receipt = _one_file_run(tmp_path, "wrap.html", page, "TextWrapper expandtabs")
    packet = build_packet(receipt, corpus, max_chars=100_000)
    shown = html_shown(page)
    assert len(shown) == len(html_text(page)[0].splitlines(keepends=True))
    assert shown[3] == "textwrap & friends\n" and shown[13] == "2 Wrapping text\n"
    assert shown[11] == "Next: fill, Previous: Intro [Index]\n"  # &nbsp; is white space, collapsed
    # An inline element's tags part no words, a block's do, a comment's none.
    assert html_shown("<p>Call <code>f</code>, <b>w</b>ord.</p><p>Next</p><!-- c -->x\n") == ["Call f, word. Next x\n"]
    assert shown[24:26] == ["    if len(line) < 40:\n", "        print(line)  # short & sweet\n"]  # <pre>: as written
    (first,) = packet.passages
    c = first.citation
    assert first.text == "".join(shown[c.line_start - 1 : c.line_end]) and "  " not in first.text
    report = cite_answer(packet, f"It wraps text [{first.handle}].", corpus)
    assert report.holds and report.counts["valid"] == 1
    # Without --corpus, `race cite` would read the bundled corpus: a packet of another is refused.
    (tmp_path / "packet.json").write_text(packet.model_dump_json(), encoding="utf-8")
    (tmp_path / "answer.txt").write_text("It wraps text [1].\n", encoding="utf-8")
    assert main(["cite", str(tmp_path / "packet.json"), str(tmp_path / "answer.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cites wrap.html, which the bundled corpus (the default) does not hold" in err, err
    assert main(["cite", str(tmp_path / "packet.json"), str(tmp_path / "answer.txt"), "--corpus", str(corpus)]) == 0
    # ... as is one whose file has a name the bundled corpus has, and other bytes.
    named = next(p for p in sorted(BUNDLED_CORPUS.rglob("*.md"))).relative_to(BUNDLED_CORPUS).as_posix()
    raw = json.loads(packet.model_dump_json())
    for handle in raw["handles"]:
        handle["source_path"] = named
    (tmp_path / "packet.json").write_text(json.dumps(raw), encoding="utf-8")
    assert main(["cite", str(tmp_path / "packet.json"), str(tmp_path / "answer.txt")]) == 2
    assert f"cites {named}, which the bundled corpus (the default) does not hold" in capsys.readouterr().err
    # Shortened: the kept lines shown, the citation the file's characters of those lines.
    cut = build_packet(receipt, corpus, max_chars=len(packet.text) - len(first.text) // 2)
    (short,) = [p for p in cut.passages if p.shortened_from is not None]
    c = short.citation
    view = html_text(page)[0]
    kept = "".join(view.splitlines(keepends=True)[c.line_start - 1 : c.line_end]).rstrip("\n")
    assert c.char_start is not None and c.char_end == c.char_start + len(kept)
    assert short.text == "".join(shown[c.line_start - 1 : c.line_end])
