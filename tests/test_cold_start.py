"""Lexical cold start: an index built and queried with no embedding model. Symbolic paths
work; vector obligations are unsatisfied with a no_eligible_backend gap naming the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import backends.models.embedding
from race.cli.main import main
from race.engine import Engine
from race.indexing.bundled import BUNDLED_CORPUS
from race.indexing.indexing import build_index


def _plan(query_class: str, text: str) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [{"id": "o", "kind": "seek_support", "query": {"text": text}, "query_class": query_class}],
        "operators": [],
    }


@pytest.fixture(scope="module")
def cold_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cold") / "index"
    assert main(["index", str(BUNDLED_CORPUS), "--out", str(out), "--no-vectors"]) == 0
    return out


def test_no_vectors_builds_only_the_symbolic_backends(cold_index: Path) -> None:
    manifest = json.loads((cold_index / "race-index.json").read_text())
    assert manifest["backends"] == ["graph", "tantivy"]
    assert "--no-vectors" in manifest["vectors_skipped"]
    assert not (cold_index / "lancedb").exists()


def test_symbolic_plans_run_without_a_model_call(cold_index: Path) -> None:
    receipt = Engine.open(cold_index).run_sync(_plan("lexical", "replication timeout"))
    (obligation,) = receipt.obligations
    assert obligation.status.value == "satisfied" and obligation.model_calls == 0
    assert receipt.evidence


def test_a_vector_obligation_is_unsatisfied_naming_the_missing_model(cold_index: Path) -> None:
    receipt = Engine.open(cold_index).run_sync(_plan("conceptual", "the broker ran out of memory"))
    (obligation,) = receipt.obligations
    assert obligation.status.value == "unsatisfied"
    (gap,) = [g for g in obligation.gaps if g.kind.value == "no_eligible_backend"]
    assert "lancedb.flat_prefilter@" in gap.detail and "all-MiniLM-L6-v2" in gap.detail


def test_without_the_model_the_index_is_lexical_with_a_notice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends.models.embedding, "default_model_dir", lambda: None)
    notices: list[str] = []
    out = tmp_path / "index"
    generations = build_index(BUNDLED_CORPUS, out, notice=notices.append)
    assert sorted(generations) == ["graph", "tantivy"]
    (notice,) = notices
    assert "all-MiniLM-L6-v2 is not installed" in notice and "lexical-only" in notice
    receipt = Engine.open(out).run_sync(_plan("conceptual", "the broker ran out of memory"))
    assert "is not installed" in receipt.obligations[0].gaps[0].detail
