"""A user's folder without a schema gets its own: ``path`` (each file's path in the corpus) and
what its front matter holds — never the bundled corpus's fields. A filter on ``path`` answers
exactly; a filter on a field the corpus lacks is bad input naming the fields it has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.ingest.corpus import load_corpus
from race.cli.main import main
from race.engine import Engine


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("notes")
    corpus, index = root / "notes", root / "index"
    (corpus / "net").mkdir(parents=True)
    (corpus / "net" / "README").write_text("Network notes\n\nThe resolver caches answers for the TTL.\n")
    (corpus / "net" / "dns.md").write_text("---\ncomponent: resolver\n---\n# DNS\n\n## Caching\n\nanswers are cached\n")
    (corpus / "disk.txt").write_text("Disk notes: the cache is flushed at shutdown.\n")
    assert main(["index", str(corpus), "--out", str(index), "--no-vectors"]) == 0
    return corpus, index


def _plan(filters: list[dict[str, object]]) -> dict[str, object]:
    query = {"id": "o", "kind": "seek_support", "query": {"text": "cache"}, "query_class": "lexical"}
    return {"schema_version": "race.plan/1", "root": "o", "obligations": [{**query, "hard_filters": filters}]}


def test_the_schema_is_the_folders_own(notes: tuple[Path, Path]) -> None:
    corpus, index = notes
    schema = json.loads((index / "schema.json").read_text())
    assert sorted(schema["fields"]) == ["component", "path"] and schema["relations"] == {}
    chunks = load_corpus(corpus).chunks
    assert (
        {c.metadata["path"] for c in chunks}
        == {c.source_path for c in chunks}
        == {
            "net/README",
            "net/dns.md",
            "disk.txt",
        }
    )


def test_a_filter_on_path_answers_exactly_that_file(notes: tuple[Path, Path]) -> None:
    _, index = notes
    receipt = Engine.open(index).run_sync(_plan([{"field": "path", "op": "eq", "value": "net/README"}]))
    assert receipt.evidence and {h.custody.source_path for i in receipt.evidence for h in i.hits} == {"net/README"}
    every = Engine.open(index).run_sync(_plan([]))
    assert {h.custody.source_path for i in every.evidence for h in i.hits} == {"net/README", "net/dns.md", "disk.txt"}


def test_a_filter_on_a_field_the_corpus_lacks_is_bad_input(
    notes: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, index = notes
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan([{"field": "doc_type", "op": "eq", "value": "readme"}])))
    assert main(["run", str(plan), "--index", str(index)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "unknown field 'doc_type'" in err and "component" in err and "path" in err
