"""I6: the plan fingerprint changes with every contract version, translator version,
backend generation and caller generation, and with nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest

from planner import compile_plan, plan_fingerprint, plan_from_dict
from race.engine import Engine, known_contracts
from tests.conftest import FIXTURES

GENERATIONS = {"tantivy": "tantivy:a", "lancedb": "lancedb:a", "graph": "graph:a"}


def _plan(**changes: Any) -> Any:
    raw = json.loads((FIXTURES / "plans" / "showcase.json").read_text())
    raw.update(changes)
    return plan_from_dict(raw)


def _fp(plan: Any = None, contracts: Any = None, generations: Any = None) -> str:
    return plan_fingerprint(plan or _plan(), contracts or known_contracts(), generations or GENERATIONS)[0]


def test_contract_version_changes_the_fingerprint() -> None:
    bumped = [c.model_copy(update={"version": "1.0.1"}) if c.rsc_id == "tantivy.bm25" else c for c in known_contracts()]
    assert _fp(contracts=bumped) != _fp()


def test_translator_version_changes_the_fingerprint() -> None:
    bumped = [
        c.model_copy(update={"translator_version": "1.1.0"}) if c.rsc_id == "tantivy.exact" else c
        for c in known_contracts()
    ]
    assert _fp(contracts=bumped) != _fp()


def test_backend_generation_changes_the_fingerprint() -> None:
    assert _fp(generations=GENERATIONS | {"tantivy": "tantivy:b"}) != _fp()


@pytest.mark.parametrize("field", ["identity", "source_dependence", "freshness", "authority"])
def test_each_caller_generation_changes_the_fingerprint(field: str) -> None:
    raw = json.loads((FIXTURES / "plans" / "showcase.json").read_text())
    raw["generations"][field] = raw["generations"][field] + "-next"
    assert _fp(plan=plan_from_dict(raw)) != _fp()


def test_nothing_else_changes_it(session_engine: Engine) -> None:
    raw = json.loads((FIXTURES / "plans" / "showcase.json").read_text())
    reordered = {k: raw[k] for k in reversed(list(raw))}
    reordered["obligations"] = list(reversed(raw["obligations"]))
    reordered["operators"] = [
        {**op, "inputs": list(reversed(op["inputs"]))} if op["op"] == "union" else op for op in raw["operators"]
    ]
    assert _fp(plan=plan_from_dict(reordered)) == _fp()
    # Statistics only choose among alternatives (I2): they are not part of the plan fingerprint.
    plan = _plan()
    stats = session_engine.statistics()
    emptied = stats.model_copy(update={"backends": {}})
    one = compile_plan(plan, contracts=known_contracts(), backend_generations=GENERATIONS, stats=stats)
    two = compile_plan(plan, contracts=known_contracts(), backend_generations=GENERATIONS, stats=emptied)
    assert one.fingerprints.plan == two.fingerprints.plan
    assert one.fingerprints.statistics != two.fingerprints.statistics


def test_a_real_commit_changes_the_tantivy_generation(tmp_path: Any) -> None:
    import tantivy

    from backends.ingest.corpus import load_corpus
    from backends.tantivy import TantivyAdapter

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "a.md").write_text("---\nid: a\ndoc_type: adr\n---\n# A\n\n## One\nraft replication\n")
    TantivyAdapter.build(load_corpus(corpus_dir), tmp_path / "idx")
    adapter = TantivyAdapter.open(tmp_path / "idx")
    before = adapter.generation()
    assert adapter.generation() == before
    index = tantivy.Index.open(str(tmp_path / "idx" / "tantivy"))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    writer.delete_documents_by_term("doc_id", "a")
    writer.commit()
    writer.wait_merging_threads()
    assert adapter.generation() != before
