"""The command line, as a user meets it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from race.cli.main import main
from race.engine import known_contracts
from tests.conftest import FIXTURES, ROOT


def test_rsc_list_shows_every_shipped_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rsc", "list"]) == 0
    out = capsys.readouterr().out
    for contract in known_contracts(remote=True):
        assert contract.ref in out
    assert "remote.bm25@1.0.0" in out


def test_rsc_show_and_validate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rsc", "show", "tantivy.bm25"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["rsc_id"] == "tantivy.bm25" and shown["filters"]["doc_type"]["support"] == "native_prefilter_exact"
    for path in sorted(ROOT.glob("backends/*/rsc/*.json")):
        assert main(["rsc", "validate", str(path)]) == 0
        assert capsys.readouterr().out.startswith("ok ")


@pytest.mark.parametrize("document", ["plan", "rsc", "receipt", "explain"])
def test_schema_prints_a_json_schema(document: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", document]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["type"] == "object" and "properties" in schema


def test_index_prints_the_generations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("---\nid: a\ndoc_type: adr\ndate: 2024-01-02\n---\n# A\n\n## One\nraft replication\n")
    (corpus / "edges.jsonl").write_text('{"src": "a", "dst": "entity:raft", "relation": "mentions"}\n')
    assert main(["index", str(corpus), "--out", str(tmp_path / "idx")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["graph", "lancedb", "tantivy"]
    assert all(line.split("\t")[1].startswith(line.split("\t")[0] + ":") for line in lines)


def test_run_json_is_the_receipt_and_repeats_byte_for_byte(index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = FIXTURES / "plans" / "operators_lexical.json"
    outputs = []
    for _ in range(2):
        assert main(["run", str(plan), "--index", str(index_dir), "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    for receipt in outputs:
        assert receipt["schema_version"] == "race.receipt/1"
        assert {"lineage", "fingerprints", "obligations", "evidence", "coverage", "gaps", "operational"} <= set(receipt)
        receipt.pop("operational")
    assert outputs[0] == outputs[1]


def test_demo_indexes_explains_and_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "memo:" in out and "physical:" in out and "obligations:" in out and "gaps (" in out
    assert (tmp_path / "fixture-index" / "race-index.json").exists()
