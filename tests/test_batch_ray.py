"""Ray, on a local cluster (2 CPUs) started once for this module: batch records equal a local
batch's, a task Ray cannot run is that plan's error record, and an index embedded by Ray
actors equals a local build."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import ray  # the race[ray] extra, which `make` installs

from race.cli.main import main
from race.evaluation.batch import LineResult, plan_lines, receipt_of
from race.evaluation.batch_file import run_batch_file
from race.options import EngineOptions
from tests.conftest import FIXTURES, roomy_plan

PLANS = sorted((FIXTURES / "plans").glob("*.json"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Ray's socket paths must stay short, so its session files go under a fresh temp dir of ours.
    temp = tmp_path_factory.mktemp("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024, _temp_dir=str(temp))
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def plans_file(path: Path) -> Path:
    lines = [orjson.dumps(roomy_plan(p)) for p in PLANS] + [b"not json"]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def normalized(out: Path) -> list[bytes]:
    """Each record with its receipt's normalized bytes in place of the receipt."""
    rows = []
    for line in out.read_bytes().splitlines():
        record = orjson.loads(line)
        receipt = receipt_of(record)
        if receipt is not None:
            record["receipt"] = receipt.normalized_bytes().decode()
        rows.append(orjson.dumps(record, option=orjson.OPT_SORT_KEYS))
    return rows


def test_ray_batch_records_equal_local_batch_records(cluster: None, index_dir: Path, tmp_path: Path) -> None:
    plans = plans_file(tmp_path / "plans.jsonl")
    options = EngineOptions(index=index_dir)
    local = run_batch_file(plans, tmp_path / "local.jsonl", options, concurrency=2)
    assert (local.receipts, local.errors) == (len(PLANS), 1)
    argv = ["batch", str(plans), "--out", str(tmp_path / "ray.jsonl"), "--index", str(index_dir), "--ray", "local"]
    assert main([*argv, "--concurrency", "2"]) == 2  # the bad-JSON line
    assert normalized(tmp_path / "ray.jsonl") == normalized(tmp_path / "local.jsonl")
    # Ray was already running: the batch joined it and left it running.
    assert ray.is_initialized()


def test_a_task_ray_cannot_run_is_that_plans_error_record(cluster: None, tmp_path: Path) -> None:
    from race.evaluation.batch_ray import run_batch_on_ray

    items = plan_lines([orjson.dumps(json.loads(p.read_text())) for p in PLANS[:3]])
    got: list[LineResult] = []
    # Every actor fails to open its engine: each plan still gets its line.
    options = EngineOptions(index=tmp_path / "no-such-index")
    run_batch_on_ray(items, options, plans="plans.jsonl", actors=2, emit=got.append)
    assert [r.line for r in got] == [1, 2, 3]
    for result in got:
        record = orjson.loads(result.record)
        assert result.kind == "internal" and record["error"]["kind"] == "internal"
        assert "\n" not in record["error"]["message"]


def small_corpus(root: Path) -> Path:
    """Six documents of different lengths, so that the embedding actors get unequal shares."""
    corpus = root / "corpus"
    corpus.mkdir()
    for n in range(6):
        words = [" ".join(["raft replication lag"] * (3 + 7 * n + i)) for i in range(3)]
        sections = "\n\n".join(f"## Part {i}\n{text}" for i, text in enumerate(words))
        front = f"---\nid: d{n}\ndoc_type: adr\ndate: 2024-01-0{n + 1}\n---\n"
        (corpus / f"d{n}.md").write_text(f"{front}# D{n}\n\n{sections}\n")
    (corpus / "edges.jsonl").write_text('{"src": "d0", "dst": "d1", "relation": "cites"}\n')
    return corpus


def masked(generation: str) -> str:
    return re.sub(r":manifest=[0-9a-f]+:", ":manifest=…:", generation)


def test_an_index_embedded_on_ray_equals_the_local_build(
    cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import lancedb

    from backends.lancedb.query import TABLE
    from race.indexing.indexing import build_index

    corpus = small_corpus(tmp_path)
    local = build_index(corpus, tmp_path / "local")
    argv = ["index", str(corpus), "--out", str(tmp_path / "ray"), "--ray", "--workers", "2"]
    assert main(argv) == 0
    on_ray = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    # Every build names its physical files afresh: tantivy its segments, Lance its fragments (so
    # the digest of its manifest differs), local or not. Every other part of a generation holds.
    assert on_ray["graph"] == local["graph"]
    assert masked(on_ray["lancedb"]) == masked(local["lancedb"])
    tables = [
        lancedb.connect(str(tmp_path / name / "lancedb")).open_table(TABLE).to_arrow() for name in ("local", "ray")
    ]
    assert tables[0].num_rows == 18
    # Vectors and custody columns, byte for byte.
    assert tables[0].equals(tables[1])
    # The manifests too: chunk and token counts, truncated text, the embedder, the ANN index.
    for manifest in ("race-index.json", "lancedb/race.json"):
        assert json.loads((tmp_path / "ray" / manifest).read_text()) == json.loads(
            (tmp_path / "local" / manifest).read_text()
        )
    assert ray.is_initialized()
