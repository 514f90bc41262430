"""Batch plans on a local Ray cluster (2 CPUs, started once for this module): the records equal a
local batch's, and a task Ray cannot run is that plan's error record."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import ray  # the race[ray] extra, which `make` installs

from race.batch import EngineOptions, LineResult, plan_lines, receipt_of, run_batch_file
from race.cli import main
from tests.conftest import FIXTURES

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
    lines = [orjson.dumps(json.loads(p.read_text())) for p in PLANS] + [b"not json"]
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
    from race.distributed import run_batch_on_ray

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
