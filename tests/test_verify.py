"""`race verify`: each citation of a receipt is re-read from the corpus and judged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from race.cli.main import main
from race.cli.render import receipt_json
from race.engine import Engine
from race.evidence.verify import EXIT_CITATION_BROKEN, verify_receipt
from race.indexing.bundled import BUNDLED_CORPUS, SHOWCASE_PLAN
from race.receipt import Receipt
from tests.conftest import roomy_plan


@pytest.fixture(scope="module")
def showcase(session_engine: Engine) -> Receipt:
    return session_engine.run_sync(roomy_plan(SHOWCASE_PLAN))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    copy = tmp_path / "corpus"
    shutil.copytree(BUNDLED_CORPUS, copy)
    return copy


def _file_with_two_cited_chunks(receipt: Receipt) -> tuple[str, str, int]:
    """A cited markdown file that has another cited chunk too: (path, chunk to edit, its first line)."""
    chunks: dict[str, dict[str, int]] = {}
    for item in receipt.evidence:
        for hit in item.hits:
            c = hit.custody
            if c.source_path.endswith(".md"):
                chunks.setdefault(c.source_path, {})[c.chunk_id] = c.line_start
    path, cited = next((p, ch) for p, ch in sorted(chunks.items()) if len(ch) >= 2)
    chunk, line = sorted(cited.items())[-1]
    return path, chunk, line


def test_an_untouched_corpus_holds_every_citation(showcase: Receipt, corpus: Path) -> None:
    report = verify_receipt(showcase, corpus)
    assert report.holds
    assert report.counts["valid"] == sum(len(item.hits) for item in showcase.evidence) > 0
    assert {c.source_hash for c in report.citations} == {"same"}


def test_editing_one_cited_passage_reports_exactly_that_citation_changed(showcase: Receipt, corpus: Path) -> None:
    path, chunk, line = _file_with_two_cited_chunks(showcase)
    lines = (corpus / path).read_text().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].rstrip("\n") + " (edited)\n"
    (corpus / path).write_text("".join(lines))

    report = verify_receipt(showcase, corpus)
    broken = report.broken()
    assert broken and {c.chunk_id for c in broken} == {chunk}
    assert {c.status for c in broken} == {"changed"}
    # The other passages of the edited file still hold: only the file's hash differs.
    same_file = [c for c in report.citations if c.source_path == path and c.chunk_id != chunk]
    assert same_file and all(c.status == "valid" and c.source_hash == "differs" for c in same_file)
    assert all(c.source_hash == "same" for c in report.citations if c.source_path != path)


def test_shifted_text_is_moved_and_a_deleted_file_is_missing(showcase: Receipt, corpus: Path) -> None:
    path, _, _ = _file_with_two_cited_chunks(showcase)
    target = corpus / path
    target.write_text(target.read_text().replace("\n\n", "\n\n\n", 1))
    gone = next(h.custody.source_path for item in showcase.evidence for h in item.hits if h.custody.source_path != path)
    (corpus / gone).unlink()

    report = verify_receipt(showcase, corpus)
    moved = [c for c in report.citations if c.source_path == path]
    assert moved and all(c.status == "moved" for c in moved)
    assert all(c.found_line_start == c.line_start + 1 for c in moved)
    assert {c.status for c in report.citations if c.source_path == gone} == {"missing"}
    assert {c.status for c in report.citations if c.source_path not in (path, gone)} == {"valid"}


def test_an_earlier_line_edited_in_place_leaves_the_cited_lines_valid(showcase: Receipt, corpus: Path) -> None:
    """An edit that changes an earlier line's length shifts every later character offset but
    no line: the citations after it still hold at their lines, so they are valid, not moved."""
    path, _, line = _file_with_two_cited_chunks(showcase)
    lines = (corpus / path).read_text().splitlines(keepends=True)
    covered = {
        n
        for item in showcase.evidence
        for h in item.hits
        for c in (h.custody,)
        if c.source_path == path and c.line_start is not None and c.line_end is not None
        for n in range(c.line_start, c.line_end + 1)
    }
    earlier = next(n for n in range(1, line) if n not in covered and lines[n - 1].strip())
    lines[earlier - 1] = lines[earlier - 1].rstrip("\n") + " (a longer line now)\n"
    (corpus / path).write_text("".join(lines))

    report = verify_receipt(showcase, corpus)
    after = [
        c for c in report.citations if c.source_path == path and c.line_start is not None and c.line_start > earlier
    ]
    assert after
    assert all(c.status == "valid" and c.source_hash == "differs" for c in after)
    assert all("characters now" in c.detail for c in after)
    assert report.holds


def test_a_path_outside_the_corpus_is_missing(showcase: Receipt, corpus: Path) -> None:
    item = showcase.evidence[0]
    hit = item.hits[0]
    escaped = hit.model_copy(update={"custody": hit.custody.model_copy(update={"source_path": "../../etc/passwd"})})
    forged = showcase.model_copy(update={"evidence": (item.model_copy(update={"hits": (escaped,)}),)})
    (check,) = verify_receipt(forged, corpus).citations
    assert check.status == "missing" and "leaves the corpus" in check.detail


def test_cli_exit_status_is_three_only_when_a_citation_broke(
    showcase: Receipt, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "receipt.json"
    saved.write_text(receipt_json(showcase))
    assert main(["verify", str(saved), "--corpus", str(corpus)]) == 0
    assert "0 changed" in capsys.readouterr().out

    path, chunk, line = _file_with_two_cited_chunks(showcase)
    lines = (corpus / path).read_text().splitlines(keepends=True)
    lines[line - 1] = "rewritten\n"
    (corpus / path).write_text("".join(lines))
    assert main(["verify", str(saved), "--corpus", str(corpus), "--json"]) == EXIT_CITATION_BROKEN
    report = json.loads(capsys.readouterr().out)
    assert {c["chunk_id"] for c in report["citations"] if c["status"] != "valid"} == {chunk}

    assert main(["verify", str(tmp_path / "absent.json"), "--corpus", str(corpus)]) == 2


def test_a_jsonl_corpus_is_checked_per_document(tmp_path: Path) -> None:
    from race.indexing.indexing import build_index

    docs = tmp_path / "docs.jsonl"
    rows = [
        {"id": "a", "title": "A", "text": "# A\n\n## One\nraft pre-vote stops election livelock\n"},
        {"id": "b", "title": "B", "text": "# B\n\n## Two\nraft elections and the ack timeout\n"},
    ]
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_index(docs, tmp_path / "idx")
    plan = {
        "schema_version": "race.plan/1",
        "root": "q",
        "obligations": [{"id": "q", "kind": "seek_support", "query": {"text": "raft"}, "query_class": "lexical"}],
        "operators": [],
        "generations": {"identity": "t", "source_dependence": "1", "freshness": "1", "authority": "1"},
    }
    receipt = Engine.open(tmp_path / "idx").run_sync(plan)
    assert {h.custody.source_path for e in receipt.evidence for h in e.hits} == {"docs.jsonl#a", "docs.jsonl#b"}
    assert verify_receipt(receipt, docs).holds

    rows[1]["text"] = rows[1]["text"].replace("ack timeout", "lease reads")
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = verify_receipt(receipt, docs)
    assert {(c.source_path, c.status) for c in report.citations} == {
        ("docs.jsonl#a", "valid"),
        ("docs.jsonl#b", "changed"),
    }
    docs.write_text(json.dumps(rows[0]) + "\n")
    (gone,) = [c for c in verify_receipt(receipt, docs).citations if c.source_path == "docs.jsonl#b"]
    assert gone.status == "missing" and "not found" in gone.detail


def test_a_receipt_carries_its_corpus_root_for_verify_and_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's index records where its corpus is; its receipts carry it (outside the normalized
    receipt), so `race verify` and `race context` need no --corpus; --corpus overrides it, and a
    corpus that moved away is bad input naming the place."""
    from race.indexing.indexing import build_index

    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "raft.md").write_text("# Raft\n\n## Leader election\n\nA leader is elected by a majority vote.\n")
    (corpus / "paxos.txt").write_text("Paxos reaches consensus with a majority of acceptors.\n")
    build_index(corpus, tmp_path / "index", vectors=False)
    copy = tmp_path / "elsewhere" / "notes"
    shutil.copytree(corpus, copy)
    plan = {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [{"id": "o", "kind": "seek_support", "query": {"text": "majority"}, "query_class": "lexical"}],
    }
    receipt = Engine.open(tmp_path / "index").run_sync(plan)
    assert receipt.corpus == str(corpus.resolve()) and receipt.evidence
    assert "corpus" not in receipt.normalized()  # where the files are is not what was found
    saved = tmp_path / "receipt.json"
    saved.write_text(receipt_json(receipt))

    assert main(["verify", str(saved)]) == 0
    out, err = capsys.readouterr()
    assert f"under {corpus.resolve()} (recorded in the receipt)" in err and "0 changed" in out
    assert main(["context", str(saved), "--max-chars", "3000"]) == 0
    assert "A leader is elected" in capsys.readouterr().out
    shutil.rmtree(corpus)
    assert main(["verify", str(saved)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(corpus.resolve()) in err and "--corpus" in err
    assert main(["verify", str(saved), "--corpus", str(copy)]) == 0
    assert f"under {copy} (--corpus)" in capsys.readouterr().err
