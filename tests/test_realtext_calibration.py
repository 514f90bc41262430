"""Calibrated recall on a real-text index where ANN is approximate (``fixtures/realtext/``:
3 227 chunks of Debian packaging text, 57 IVF partitions of which 20 are probed).

The index is built once per session from the committed chunk vectors (``race index`` with
the model's bits read from ``vectors.npy``), so its calibration belongs to that session's
trained IVF index (LanceDB's k-means is not seedable): the fresh queries are measured on the
same trained index, drawn with other seeds and disjoint from the calibration's own queries.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.calibration import read_calibration
from backends.ingest.corpus import Chunking, load_corpus
from backends.lancedb import LanceAdapter
from backends.lancedb.build import ann_nprobes, ann_partitions, chunk_text
from backends.lancedb.calibration import calibrate
from backends.models.embedding import MiniLMEmbedder, token_counter
from benchmarks.realtext import CORPUS, build_realtext_index, stored_chunks
from race.engine import Engine
from rsc import Calibration, RecallBucket

FRESH_SEEDS = (101, 102, 103)


@pytest.fixture(scope="session")
def realtext_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_realtext_index(tmp_path_factory.mktemp("realtext") / "index")


@pytest.fixture(scope="session")
def realtext_calibration(realtext_index: Path) -> dict[str, Calibration]:
    found = read_calibration(realtext_index / "lancedb")
    assert found is not None
    generation, calibrations = found
    assert generation == LanceAdapter.open(realtext_index).generation()
    return {c.rsc_id: c for c in calibrations}


def test_committed_chunks_are_the_corpus_chunks() -> None:
    stored = stored_chunks()
    corpus = load_corpus(CORPUS, chunking=Chunking(tokens=token_counter()))
    assert stored.ids == tuple(c.chunk_id for c in corpus.chunks)
    assert stored.texts == tuple(chunk_text(c) for c in corpus.chunks)
    assert len(stored.ids) > 3000 and len({c.doc_id for c in corpus.chunks}) > 600


def test_committed_vectors_are_the_models_bits() -> None:
    """A seeded sample of the chunks, embedded again here, gives the committed float32 bits."""
    stored = stored_chunks()
    embedder = MiniLMEmbedder()
    assert embedder.identity == stored.identity
    rows = np.random.default_rng(2026).choice(len(stored.texts), size=6, replace=False)
    again = embedder.embed([stored.texts[i] for i in rows])
    assert again.view(np.uint32).tolist() == stored.vectors[rows].view(np.uint32).tolist()


def test_ann_is_approximate_on_this_index(realtext_index: Path, realtext_calibration: dict[str, Calibration]) -> None:
    manifest = json.loads((realtext_index / "lancedb" / "race.json").read_text())
    rows = manifest["ann_index"]["trained_rows"]
    assert rows == len(stored_chunks().ids)
    assert ann_partitions(rows) == 57 and ann_nprobes(57) == 20
    pre = realtext_calibration["lancedb.ann_prefilter"]
    means = [b.mean_recall for b in _buckets(pre)]
    # Not every bucket measures perfect recall: probing 20 of 57 partitions misses neighbours.
    assert min(means) < 1.0, means


def _buckets(cal: Calibration) -> list[RecallBucket]:
    out = [cal.unfiltered] if cal.unfiltered is not None else []
    return [*out, *cal.buckets, *(b for bs in cal.fields.values() for b in bs)]


def _pairs(declared: Calibration, fresh: Calibration) -> list[tuple[str, RecallBucket, RecallBucket]]:
    out = []
    if declared.unfiltered is not None and fresh.unfiltered is not None:
        out.append(("unfiltered", declared.unfiltered, fresh.unfiltered))
    found = {b.bucket: b for b in fresh.buckets}
    out += [(b.bucket, b, found[b.bucket]) for b in declared.buckets if b.bucket in found]
    for name, buckets in declared.fields.items():
        other = {b.bucket: b for b in fresh.fields.get(name, ())}
        out += [(f"{name} {b.bucket}", b, other[b.bucket]) for b in buckets if b.bucket in other]
    return out


def test_declared_bounds_hold_on_fresh_queries(
    realtext_index: Path, realtext_calibration: dict[str, Calibration]
) -> None:
    """On the same trained index, queries the calibration never asked (other seeds, disjoint
    rows) measure a mean recall at least the declared lower bound in >= 95 % of buckets."""
    adapter = LanceAdapter.open(realtext_index)
    held = total = 0
    misses: list[Any] = []
    for seed in FRESH_SEEDS:
        for fresh in calibrate(adapter, seed=seed, disjoint_from=7):
            declared = realtext_calibration[fresh.rsc_id]
            for label, before, now in _pairs(declared, fresh):
                total += 1
                if now.mean_recall >= before.lower_bound:
                    held += 1
                else:
                    misses.append((fresh.rsc_id, label, before.lower_bound, now.mean_recall, now.queries))
    assert total >= 60 and held / total >= 0.95, (held, total, misses)


def test_every_bucket_is_measured(realtext_calibration: dict[str, Calibration]) -> None:
    pre = realtext_calibration["lancedb.ann_prefilter"]
    assert {b.bucket for b in pre.buckets} == {"<0.1%", "0.1-1%", "1-10%", "10-50%", ">50%"}
    assert set(pre.fields) == {"area", "kind", "package", "priority"}


def _plan(filters: list[dict[str, Any]], contract: str) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [
            {
                "id": "o",
                "kind": "seek_support",
                "query": {"text": "security fix for a buffer overflow in the parser"},
                "query_class": "conceptual",
                "k": 10,
                "hard_filters": filters,
                "allow_contracts": [contract],
                "required_coverage": "heuristic",
            }
        ],
        "operators": [],
    }


def test_an_approximate_leg_names_its_expected_recall(
    realtext_index: Path, realtext_calibration: dict[str, Calibration]
) -> None:
    """The receipt of an ANN leg carries the bucket of its filter, the sample size and the
    fingerprint of the calibration that promised it; the promise is that bucket's bound."""
    engine = Engine.open(realtext_index)
    pre = realtext_calibration["lancedb.ann_prefilter"]
    receipt = engine.run_sync(_plan([{"field": "kind", "value": "copyright"}], "lancedb.ann_prefilter"))
    hits = [h for item in receipt.evidence for h in item.hits]
    assert len(hits) == 10
    for hit in hits:
        promise = hit.custody.expected_recall
        assert promise is not None
        assert promise.calibration == pre.fingerprint
        assert promise.bucket == "10-50%", promise.bucket
        bucket = next(b for b in pre.fields["kind"] if b.bucket == "10-50%")
        overall = next(b for b in pre.buckets if b.bucket == "10-50%")
        worst = min((bucket, overall), key=lambda b: (b.lower_bound, b.queries))
        assert promise.recall == worst.lower_bound and promise.queries == worst.queries
        assert math.isfinite(hit.custody.score)
