"""Every file of a folder corpus accounted for: `race index` reads Markdown, plain text with or
without an extension, reStructuredText and HTML with exact line spans, skips every other file
with its reason, prints the counts, keeps them in the index, and `race inspect` shows them."""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from backends.ingest.corpus import load_corpus
from backends.ingest.formats import html_text
from race.cli.main import main
from race.engine import Engine
from race.evidence.verify import verify_receipt
from rsc import CorpusError
from tests.conftest import FIXTURES
from tests.test_indexing_bad_corpus import make_corpus

SKIPPED_CASES = sorted((FIXTURES / "cases" / "skipped_files").glob("*.json"))


def _wrapped(doc: str | None) -> str:
    """Real text nobody on the project wrote: a standard library module's docstring."""
    return "\n".join(textwrap.wrap(" ".join(str(doc).split()), 70))


def _mixed(root: Path) -> None:
    """A folder of mixed files: every format read, and one file of each reason to skip."""
    import html as html_module
    import json as json_module

    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "README").write_text(f"json\n====\n\n{_wrapped(json_module.__doc__)}\n")
    (root / "pkg" / "README.Debian").write_text(f"Notes for Debian\n\n{_wrapped(textwrap.__doc__)}\n")
    (root / "pkg" / "changelog").write_text(
        "pkg (1.2-1) unstable; urgency=medium\n\n  * "
        + "\n    ".join(_wrapped(os.__doc__).splitlines())
        + "\n\n -- A Maintainer <a@example.org>  Mon, 01 Jan 2024 00:00:00 +0000\n"
    )
    (root / "pkg" / "guide.md").write_text(f"# Guide\n\n## Parsing\n\n{_wrapped(argparse.__doc__)}\n")
    (root / "pkg" / "notes.rst").write_text(f"=====\nNotes\n=====\n\nUsage\n-----\n\n{_wrapped(argparse.__doc__)}\n")
    body = html_module.escape(_wrapped(html_module.__doc__)).replace("\n", "\n<br>")
    (root / "pkg" / "page.html").write_text(
        "<!DOCTYPE html>\n<html><head><title>HTML &amp; entities</title>\n"
        "<style>p { color: red }</style><script>var x = '<p>not text</p>';</script></head>\n"
        f"<body><h1>Escaping</h1>\n<p>{body}</p>\n<p>caf&eacute; &#8212; done</p>\n</body></html>\n"
    )
    (root / "pkg" / "NOTES").write_bytes(b"text\x00with a NUL byte\n")
    (root / "pkg" / "latin.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (root / "pkg" / "empty.txt").write_text("  \n\n")
    (root / "pkg" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "pkg" / "changelog.Debian.gz").write_bytes(b"\x1f\x8b\x08\x00")
    (root / "pkg" / "draft.md").write_text("# Draft\n\nnot for the index\n")
    (root / "pkg" / "gone.md").symlink_to("nowhere.md")


EXPECTED_SKIPS = {
    "pkg/NOTES": "binary",
    "pkg/latin.txt": "not_utf8",
    "pkg/empty.txt": "empty",
    "pkg/logo.png": "unsupported_type",
    "pkg/changelog.Debian.gz": "unsupported_type",
    "pkg/draft.md": "excluded",
    "pkg/gone.md": "symlink",
}


def test_a_folder_of_mixed_files_is_accounted_for_and_spans_match_the_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, index = tmp_path / "docs", tmp_path / "index"
    _mixed(corpus)
    assert main(["index", str(corpus), "--out", str(index), "--no-vectors", "--exclude", "draft*"]) == 0
    err = capsys.readouterr().err
    reasons = "2 unsupported type, 1 excluded, 1 symlink, 1 empty, 1 binary, 1 not UTF-8"
    assert f"race: 13 files: 6 indexed, 7 skipped ({reasons})" in err

    manifest = json.loads((index / "race-index.json").read_text())
    assert manifest["files"] == {
        "indexed": 6,
        "skipped": {"unsupported_type": 2, "excluded": 1, "symlink": 1, "empty": 1, "binary": 1, "not_utf8": 1},
    }
    assert main(["inspect", str(index), "--json"]) == 0
    shown: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert shown["documents"] == 6 and shown["corpus_root"] == str(corpus.resolve())
    assert {s["path"]: s["reason"] for s in shown["files"]["skipped"]} == EXPECTED_SKIPS
    assert shown["files"]["exclude"] == ["draft*"] and shown["sizes"]["total"] > 0
    assert main(["inspect", str(index)]) == 0
    text = capsys.readouterr().out
    assert "files      6 indexed, 7 skipped" in text and "skipped  pkg/latin.txt: not UTF-8 (byte 3 (line 1))" in text

    # Every chunk's span is the source's own lines and characters (HTML: its text view).
    loaded = load_corpus(corpus, exclude=("draft*",))
    assert {c.source_path for c in loaded.chunks} == {
        "pkg/README",
        "pkg/README.Debian",
        "pkg/changelog",
        "pkg/guide.md",
        "pkg/notes.rst",
        "pkg/page.html",
    }
    for chunk in loaded.chunks:
        source = (corpus / chunk.source_path).read_text(encoding="utf-8")
        if chunk.source_path.endswith(".html"):
            source = html_text(source)[0]
        lines = source.splitlines(keepends=True)
        assert chunk.text == source[chunk.char_start : chunk.char_end]
        assert chunk.text.startswith(lines[chunk.line_start - 1].rstrip("\n")[:1])
        assert chunk.char_start >= sum(len(x) for x in lines[: chunk.line_start - 1])
        assert chunk.char_end <= sum(len(x) for x in lines[: chunk.line_end])
    titles = {c.source_path: c.title for c in loaded.chunks}
    assert titles["pkg/notes.rst"] == "Notes" and titles["pkg/page.html"] == "HTML & entities"
    page = next(c for c in loaded.chunks if c.source_path == "pkg/page.html" and "café" in c.text)
    assert "<p>" not in page.text and "not text" not in page.text and "color" not in page.text

    # Citations of HTML and extensionless files verify against the files as they are.
    plan = {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [
            {"id": "o", "kind": "seek_support", "query": {"text": "escape JSON café"}, "query_class": "lexical"}
        ],
    }
    receipt = Engine.open(index).run_sync(plan)
    cited = {h.custody.source_path for item in receipt.evidence for h in item.hits}
    assert {"pkg/page.html", "pkg/README"} <= cited
    assert verify_receipt(receipt, corpus).holds


@pytest.mark.parametrize("case_path", SKIPPED_CASES, ids=[p.stem for p in SKIPPED_CASES])
def test_a_file_that_cannot_be_a_document_is_skipped_and_named(
    case_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case: dict[str, Any] = json.loads(case_path.read_text())
    corpus = make_corpus(case, tmp_path / "corpus")
    assert main(["index", str(corpus), "--out", str(tmp_path / "out"), "--no-vectors"]) == 0
    err = capsys.readouterr().err
    ingest = json.loads((tmp_path / "out" / "ingest.json").read_text())
    assert ingest["indexed"] == 1
    for want in case["expect_skipped"]:
        found = [s for s in ingest["skipped"] if s["path"] == want["path"]]
        assert found and found[0]["reason"] == want["reason"] and want["detail"] in found[0]["detail"], found
        assert "1 indexed" in err and f"{len(ingest['skipped'])} skipped (" in err


def test_a_folder_of_nothing_readable_is_bad_input_naming_the_first_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "b.txt").write_bytes(b"\xff\xfeplain text in UTF-16")
    assert main(["index", str(corpus), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no documents" in err and "b.txt not UTF-8: byte 0" in err
    assert not (tmp_path / "out").exists()


def test_include_globs_choose_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "docs"
    _mixed(corpus)
    out = tmp_path / "index"
    include = ["--include", "*.md", "--include", "README*"]
    assert main(["index", str(corpus), "--out", str(out), "--no-vectors", *include]) == 0
    # guide.md, draft.md, README and README.Debian; gone.md matches but leads nowhere.
    assert "4 indexed" in capsys.readouterr().err
    assert json.loads((out / "race-index.json").read_text())["documents"] == 4


def test_files_whose_names_would_share_an_id_keep_their_whole_paths(tmp_path: Path) -> None:
    """As /usr/share/doc/git/contrib/contacts holds the script ``git-contacts`` beside its manual
    ``git-contacts.txt``: both are documents, each named by its whole path; every other file keeps
    the id it always had."""
    root = tmp_path / "c"
    (root / "contacts").mkdir(parents=True)
    (root / "contacts" / "git-contacts").write_text("#!/usr/bin/perl\n# list people to cc on a patch\n")
    (root / "contacts" / "git-contacts.txt").write_text("git-contacts(1)\n\nLists people to cc on a patch.\n")
    (root / "guide.md").write_text("# Guide\n\nThe Markdown guide.\n")
    (root / "guide.txt").write_text("The plain text guide.\n")
    (root / "notes.md").write_text("# Notes\n\nNotes alone.\n")
    (root / "README").write_text("Read me.\n")
    (root / "README.Debian").write_text("Debian notes.\n")
    (root / "a b.txt").write_text("A name with a space.\n")
    (root / "a~20b.txt").write_text("A name with the escape character in it.\n")
    ids = sorted({(c.doc_id, c.source_path) for c in load_corpus(root).chunks})
    assert ids == [
        ("README", "README"),
        ("README.Debian", "README.Debian"),
        ("a~20b", "a b.txt"),
        ("a~7E20b", "a~20b.txt"),
        ("contacts/git-contacts", "contacts/git-contacts"),
        ("contacts/git-contacts.txt", "contacts/git-contacts.txt"),
        ("guide.md", "guide.md"),
        ("guide.txt", "guide.txt"),
        ("notes", "notes.md"),
    ]
    (root / "notes.md").write_text("---\nid: README\n---\n# Notes\n")
    with pytest.raises(CorpusError, match="document id 'README' is also used by README"):
        load_corpus(root)
