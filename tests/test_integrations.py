"""RACE inside Haystack 2 and LlamaIndex, against the real libraries: a pipeline runs end to end
on the bundled index, its documents and nodes carry the receipt's custody and ranks, and a leg
made to time out is a ``timeout`` gap on every one of them (and on the receipt when there are
none)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# Haystack reads this when imported: no usage reports to a remote service from a test run.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import pytest
from haystack import AsyncPipeline, Document, Pipeline
from haystack.components.builders import PromptBuilder
from haystack.core.errors import SerializationError
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers.no_text import NoText
from llama_index.core.schema import NodeWithScore, TextNode

from race import Engine, Receipt
from race.extras import ExtraMissing
from race.integrations import haystack as race_haystack
from race.integrations import llamaindex as race_llamaindex
from rsc import InputError
from tests.faults.injector import FaultyAdapter, delay

QUERY = "the broker ran out of memory"
LEG_TIMEOUT_MS = 2_000
"""Long enough for a real leg on a loaded machine; the delayed lancedb leg sleeps far past it."""


def slow_lancedb(index_dir: Path) -> Engine:
    """An engine over the bundled index whose lancedb leg sleeps 60 s before asking."""
    adapters = dict(Engine.open(index_dir).adapters)
    adapters["lancedb"] = FaultyAdapter(inner=adapters["lancedb"], faults={"q": delay(60.0)})
    return Engine(adapters)


def same_as_receipt(metas: list[dict[str, Any]], receipt: Receipt) -> None:
    """Each metadata is its evidence item's: rank, key, status and every hit's custody."""
    assert len(metas) == len(receipt.evidence) > 0
    for meta, item in zip(metas, receipt.evidence, strict=True):
        best = item.hits[0]
        assert meta["race_rank"] == item.rank and meta["race_key"] == item.key
        assert meta["race_status"] == item.status.value and meta["race_obligations"] == list(item.obligations)
        assert (meta["source_path"], meta["line_start"], meta["line_end"], meta["source_hash"]) == (
            best.custody.source_path,
            best.custody.line_start,
            best.custody.line_end,
            best.custody.source_hash,
        )
        assert meta["chunk_id"] == best.chunk_id and meta["doc_id"] == best.doc_id
        assert [(c["backend"], c["rsc"], c["rank"], c["score"], c["score_kind"]) for c in meta["race_custody"]] == [
            (h.custody.backend, h.custody.rsc, h.custody.rank, h.custody.score, h.custody.score_kind.value)
            for h in item.hits
        ]
        assert meta["race_evidence_fingerprint"] == receipt.fingerprints.evidence


def timed_out(gaps: list[dict[str, Any]]) -> bool:
    return any(g["kind"] == "timeout" and g["backend"] == "lancedb" for g in gaps)


# -- Haystack --------------------------------------------------------------------------------


def prompt_pipeline(retriever: race_haystack.RaceRetriever, pipeline: Pipeline | AsyncPipeline) -> Any:
    template = "{% for d in documents %}[{{ d.meta.race_rank }}] {{ d.meta.source_path }}\n{% endfor %}{{ query }}"
    pipeline.add_component("retriever", retriever)
    pipeline.add_component("prompt", PromptBuilder(template=template, required_variables=["documents", "query"]))
    pipeline.connect("retriever.documents", "prompt.documents")
    return pipeline


def test_a_haystack_pipeline_runs_end_to_end_with_custody(index_dir: Path) -> None:
    pipeline = prompt_pipeline(race_haystack.RaceRetriever(index_dir, k=4), Pipeline())
    out = pipeline.run({"retriever": {"query": QUERY}, "prompt": {"query": "Why?"}}, include_outputs_from={"retriever"})
    documents: list[Document] = out["retriever"]["documents"]
    receipt: Receipt = out["retriever"]["receipt"]
    same_as_receipt([d.meta for d in documents], receipt)
    assert [d.id for d in documents] == [item.key for item in receipt.evidence]
    assert documents[0].content == receipt.evidence[0].hits[0].text
    assert documents[0].score == receipt.evidence[0].fusion.score
    assert documents[0].meta["race_gaps"] == [] and documents[0].meta["doc_type"]  # the corpus's own fields too
    assert documents[0].meta["race_coverage"]["search_coverage"] == receipt.coverage.search_coverage.value
    assert out["prompt"]["prompt"].startswith(f"[1] {documents[0].meta['source_path']}\n")
    assert Document.from_dict(json.loads(json.dumps(documents[0].to_dict()))) == documents[0]  # meta is plain JSON


def test_a_timed_out_leg_is_a_gap_on_every_haystack_document(index_dir: Path) -> None:
    retriever = race_haystack.RaceRetriever(slow_lancedb(index_dir), k=4, leg_timeout_ms=LEG_TIMEOUT_MS)
    out = prompt_pipeline(retriever, Pipeline()).run(
        {"retriever": {"query": QUERY}, "prompt": {"query": "Why?"}}, include_outputs_from={"retriever"}
    )
    documents, receipt = out["retriever"]["documents"], out["retriever"]["receipt"]
    assert documents and all(timed_out(d.meta["race_gaps"]) for d in documents)
    assert {c["backend"] for d in documents for c in d.meta["race_custody"]} == {"tantivy"}
    assert all(d.meta["race_coverage"]["search_coverage"] == "unknown" for d in documents)
    same_as_receipt([d.meta for d in documents], receipt)


@pytest.mark.anyio
async def test_an_async_haystack_pipeline_with_no_documents_still_has_the_gap(index_dir: Path) -> None:
    retriever = race_haystack.RaceRetriever(
        slow_lancedb(index_dir), k=4, strategy="vector", leg_timeout_ms=LEG_TIMEOUT_MS
    )
    pipeline = AsyncPipeline()
    pipeline.add_component("retriever", retriever)
    out = await pipeline.run_async({"retriever": {"query": QUERY}})
    assert out["retriever"]["documents"] == []
    receipt: Receipt = out["retriever"]["receipt"]
    assert [(g.kind.value, g.backend) for g in receipt.gaps] == [("timeout", "lancedb")]
    assert receipt.coverage.search_coverage.value == "unknown"


def test_haystack_filters_narrow_the_where_and_what_race_cannot_hold_is_refused(session_engine: Engine) -> None:
    retriever = race_haystack.RaceRetriever(session_engine, k=5, strategy="lexical", where={"status": "final"})
    filters = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.doc_type", "operator": "in", "value": ["incident", "advisory"]},
            {"field": "meta.date", "operator": ">=", "value": "2024-06-01"},
        ],
    }
    documents = retriever.run(QUERY, top_k=3, filters=filters)["documents"]
    assert 0 < len(documents) <= 3
    for d in documents:
        assert d.meta["status"] == "final" and d.meta["doc_type"] in ("incident", "advisory")
        assert d.meta["date"] >= "2024-06-01"
    either = {
        "operator": "OR",
        "conditions": [
            {"field": "meta.doc_type", "operator": "==", "value": "incident"},
            {"field": "meta.component", "operator": "!=", "value": "storage"},
        ],
    }
    documents = retriever.run(QUERY, top_k=5, filters=either)["documents"]
    assert documents and all(d.meta["doc_type"] == "incident" or d.meta["component"] != "storage" for d in documents)
    negated = {"operator": "NOT", "conditions": [{"field": "meta.doc_type", "operator": "==", "value": "incident"}]}
    with pytest.raises(InputError, match="'NOT' cannot be a RACE hard filter") as raised:
        retriever.run(QUERY, filters=negated)
    assert raised.value.where == "filters"
    nested = {"operator": "OR", "conditions": [filters]}
    with pytest.raises(InputError, match="an OR filter joins comparisons"):
        retriever.run(QUERY, filters=nested)


def test_a_haystack_pipeline_serializes_by_index_path_and_refuses_an_engine_object(
    index_dir: Path, session_engine: Engine
) -> None:
    pipeline = Pipeline()
    pipeline.add_component("retriever", race_haystack.RaceRetriever(index_dir, k=2, strategy="lexical"))
    data = pipeline.to_dict()
    assert data["components"]["retriever"]["init_parameters"]["engine"] == str(index_dir)
    again = Pipeline.from_dict(data)
    documents = again.run({"retriever": {"query": QUERY}})["retriever"]["documents"]
    assert len(documents) == 2 and documents[0].meta["race_rank"] == 1
    live = Pipeline()
    live.add_component("retriever", race_haystack.RaceRetriever(session_engine))
    with pytest.raises(SerializationError, match="build it on the index path"):
        live.to_dict()


# -- LlamaIndex ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_llamaindex_retrieval_sync_and_async_carries_custody(index_dir: Path) -> None:
    retriever = race_llamaindex.RaceRetriever(index_dir, k=4)
    nodes = await retriever.aretrieve(QUERY)
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    assert retriever.last_receipt is not None
    same_as_receipt([n.node.metadata for n in nodes], retriever.last_receipt)
    assert [n.node.node_id for n in nodes] == [item.key for item in retriever.last_receipt.evidence]
    assert nodes[0].score == retriever.last_receipt.evidence[0].fusion.score
    shown = nodes[0].node.get_content(metadata_mode="llm")  # type: ignore[arg-type]
    assert "source_path: " in shown and "race_gaps" not in shown and "race_custody" not in shown
    assert TextNode.model_validate_json(nodes[0].node.model_dump_json()).metadata == nodes[0].node.metadata
    again = retriever.retrieve(QUERY)  # sync, from inside a running loop: the engine's own thread
    assert [n.node.node_id for n in again] == [n.node.node_id for n in nodes]


def test_a_llamaindex_query_engine_runs_end_to_end_with_the_timeout_gap(index_dir: Path) -> None:
    retriever = race_llamaindex.RaceRetriever(slow_lancedb(index_dir), k=4, leg_timeout_ms=LEG_TIMEOUT_MS)
    engine = RetrieverQueryEngine(retriever, response_synthesizer=NoText(llm=MockLLM()))
    response = engine.query(QUERY)
    nodes = response.source_nodes
    assert nodes and all(timed_out(n.node.metadata["race_gaps"]) for n in nodes)
    assert all(n.node.metadata["race_coverage"]["search_coverage"] == "unknown" for n in nodes)
    assert retriever.last_receipt is not None
    same_as_receipt([n.node.metadata for n in nodes], retriever.last_receipt)


@pytest.mark.anyio
async def test_llamaindex_with_no_nodes_keeps_the_gap_on_the_last_receipt(index_dir: Path) -> None:
    retriever = race_llamaindex.RaceRetriever(
        slow_lancedb(index_dir), k=4, strategy="vector", leg_timeout_ms=LEG_TIMEOUT_MS
    )
    assert await retriever.aretrieve(QUERY) == []
    assert retriever.last_receipt is not None
    assert [(g.kind.value, g.backend) for g in retriever.last_receipt.gaps] == [("timeout", "lancedb")]


# -- packaging -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("race.integrations.haystack", "haystack", "haystack"),
        ("race.integrations.llamaindex", "llama_index", "llamaindex"),
    ],
)
def test_a_missing_framework_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str
) -> None:
    for name in [m for m in sys.modules if m == framework or m.startswith(f"{framework}.")]:
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, framework, None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ExtraMissing, match=rf"pip install 'race-engine\[{extra}\]'"):
        importlib.import_module(module)


def test_the_integrations_package_imports_no_framework() -> None:
    code = (
        "import sys, race.integrations, race.integrations.common\n"
        "print(sorted(m for m in ('haystack', 'llama_index') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("retriever", [race_haystack.RaceRetriever, race_llamaindex.RaceRetriever])
def test_a_deadline_a_plan_cannot_hold_is_refused_when_the_retriever_is_built(
    session_engine: Engine, retriever: Any
) -> None:
    with pytest.raises(InputError) as raised:
        retriever(session_engine, leg_timeout_ms=0)
    assert raised.value.where == "leg_timeout_ms"
    with pytest.raises(InputError, match="an Engine or an index path") as raised:
        retriever(42)
    assert raised.value.where == "engine"
