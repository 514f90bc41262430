"""A LanceDB table written outside RACE (with ``lancedb`` itself) from real text nobody on the
project wrote, Python's own module docstrings, embedded with the second model of
``tests/tiny_bert.py``: attached through the catalog with its model's folder, its exact vector leg
is a numpy top-k over its rows; attached with the model's identity alone, it is searched with
the caller's vectors only, and its contract says so."""

from __future__ import annotations

import importlib
import inspect
import json
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from backends.models.folder import FolderEmbedder
from race.engine import Engine
from rsc import GapKind
from tests.tiny_bert import HIDDEN, write_tiny_bert

MODULES = (
    "argparse", "bisect", "calendar", "collections", "csv", "dataclasses", "datetime", "decimal", "difflib",
    "email", "fractions", "functools", "heapq", "http", "inspect", "ipaddress", "itertools", "json", "logging",
    "pathlib", "pickle", "queue", "random", "re", "shlex", "shutil", "sqlite3", "statistics", "string",
    "subprocess", "tarfile", "tempfile", "textwrap", "threading", "typing", "unittest", "urllib", "uuid",
    "zipfile", "zlib",
)  # fmt: skip
TABLE = "pydocs"
QUERIES = ("compress data into an archive file", "parse command line options", "dates and time zones")


def _paragraphs() -> list[dict[str, Any]]:
    rows = []
    for module in MODULES:
        doc = inspect.getdoc(importlib.import_module(module)) or ""
        for n, paragraph in enumerate(p.strip() for p in doc.split("\n\n")):
            if len(paragraph) >= 40:
                rows.append({"key": f"{module}#{n}", "module": module, "body": paragraph[:1500]})
    return rows


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lake")
    folder = write_tiny_bert(root / "tiny-bert")
    model = FolderEmbedder(folder, name="tiny-bert")
    rows = _paragraphs()
    vectors = model.embed([r["body"] for r in rows])
    table = pa.table(
        {
            "key": [r["key"] for r in rows],
            "module": [r["module"] for r in rows],
            "body": [r["body"] for r in rows],
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), HIDDEN),
        }
    )
    lancedb.connect(str(root / "db")).create_table(TABLE, data=table)
    return {"root": root, "folder": folder, "model": model, "rows": rows, "vectors": vectors}


def _engine(lake: dict[str, Any], embedder: dict[str, Any]) -> Engine:
    instance = {
        "kind": "lancedb",
        "location": str(lake["root"] / "db"),
        "table": TABLE,
        "embedder": embedder,
        "fields": {"id": "key", "text": "body"},
    }
    path = lake["root"] / f"catalog-{len(embedder)}.json"
    path.write_text(json.dumps({"schema_version": "race.catalog/1", "instances": {"docs": instance}}))
    return Engine.from_catalog(path)


def _plan(k: int, modules: tuple[str, ...] = (), **query: Any) -> dict[str, Any]:
    ob: dict[str, Any] = {
        "id": "v",
        "kind": "seek_support",
        "query": query,
        "query_class": "conceptual",
        "k": k,
        "mandatory": False,
        "allow_contracts": ["docs.lancedb.flat_prefilter"],
    }
    if modules:
        ob["hard_filters"] = [{"field": "module", "op": "in", "values": list(modules)}]
    return {"schema_version": "race.plan/1", "root": "v", "obligations": [ob]}


def _numpy_top_k(lake: dict[str, Any], query: np.ndarray, k: int, modules: tuple[str, ...] = ()) -> list[Any]:
    vectors = lake["vectors"].astype(np.float64)
    q = query.astype(np.float64)
    distances = 1.0 - vectors @ q / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q))
    rows = lake["rows"]
    ranked = sorted(
        (float(d), r["key"]) for d, r in zip(distances, rows, strict=True) if not modules or r["module"] in modules
    )
    return ranked[:k]


def _answer(receipt: Any) -> list[tuple[float, str]]:
    hits = [e.hits[0] for e in sorted(receipt.evidence, key=lambda e: e.rank)]
    return [(h.custody.score, h.chunk_id) for h in hits]


def test_the_exact_vector_leg_is_the_numpy_top_k(lake: dict[str, Any]) -> None:
    assert len(lake["rows"]) > 100
    engine = _engine(lake, {"name": "tiny-bert", "path": str(lake["folder"])})
    contract = next(c for c in engine.contracts() if c.rsc_id == "docs.lancedb.flat_prefilter")
    assert contract.model_calls == 1
    for text in QUERIES:
        for modules in ((), ("tarfile", "zipfile", "zlib", "shutil")):
            receipt = engine.run_sync(_plan(8, modules, text=text))
            expected = _numpy_top_k(lake, lake["model"].embed_queries([text])[0], 8, modules)
            got = _answer(receipt)
            assert [key for _, key in got] == [key for _, key in expected]
            assert [d for d, _ in got] == pytest.approx([d for d, _ in expected], abs=1e-5)
            assert receipt.obligations[0].search_coverage.value == "exhaustive_for_declared_fragment"
    assert lake["model"].identity.model_dump(mode="json") in [dict(m) for m in receipt.models]


def test_a_model_race_cannot_run_is_searched_with_caller_vectors_alone(lake: dict[str, Any]) -> None:
    model = lake["model"]
    identity = model.identity.model_copy(update={"name": "BAAI/bge-small-en-v1.5"})
    engine = _engine(lake, identity.model_dump(mode="json"))
    contract = next(c for c in engine.contracts() if c.rsc_id == "docs.lancedb.flat_prefilter")
    assert contract.model_calls == 0 and "from the caller alone" in contract.description
    # Text alone cannot be embedded here: the leg is a gap, never an empty answer read as absence.
    refused = engine.run_sync(_plan(5, text=QUERIES[0]))
    gaps = refused.obligations[0].gaps
    assert [g.kind for g in gaps] == [GapKind.BACKEND_ERROR] and "does not run in RACE" in gaps[0].detail
    assert refused.obligations[0].status.value == "unsatisfied" and not refused.evidence
    # The caller's vector of that identity: no model call, the same exact top-k.
    for text in QUERIES:
        vector = model.embed_queries([text])[0]
        query = {"vector": [float(v) for v in vector], "embedder": identity.model_dump(mode="json")}
        receipt = engine.run_sync(_plan(6, **query))
        assert receipt.obligations[0].model_calls == 0
        expected = _numpy_top_k(lake, vector, 6)
        assert [key for _, key in _answer(receipt)] == [key for _, key in expected]
