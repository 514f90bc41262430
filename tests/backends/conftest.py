"""Milvus collections for the backend suites: milvus-lite started by the tests in a temporary
folder (through the same pymilvus client a Milvus cluster uses), holding the bundled corpus
with the vectors of the session's LanceDB index, and stopped when the session ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import load_corpus
from race.indexing.bundled import BUNDLED_CORPUS

MILVUS_INSTANCES = ("FLAT", "HNSW")

# Indexes RACE did not build (catalog instances attached through a field mapping).
from tests.backends.attached import attached_lance, attached_sources, attached_tantivy  # noqa: E402, F401


def milvus_available() -> bool:
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def milvus_instances(index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Instance folders by index type, each with its own milvus-lite file; the servers are
    released and every adapter opened from them closed after the session."""
    if not milvus_available():
        pytest.skip("the race[milvus] extra (pymilvus, milvus-lite) is not installed")
    from milvus_lite import server_manager_instance

    from backends.milvus.adapter import LITE_FILE, MilvusAdapter, lance_vectors

    corpus = load_corpus(BUNDLED_CORPUS)
    vectors = lance_vectors(index_dir, corpus)
    root = tmp_path_factory.mktemp("milvus")
    folders = {}
    for index_type in MILVUS_INSTANCES:
        folder = root / index_type.lower()
        MilvusAdapter.build(corpus, folder, index_type=index_type, vectors=vectors)
        folders[index_type] = folder
    opened: list[MilvusAdapter] = []
    try:
        yield {"folders": folders, "vectors": vectors, "corpus": corpus, "opened": opened}
    finally:
        for adapter in opened:
            adapter.close()
        for folder in folders.values():
            server_manager_instance.release_server(str(folder / MilvusAdapter.backend / LITE_FILE))


@pytest.fixture(scope="session")
def milvus_flat(milvus_instances: dict[str, Any]) -> Any:
    from backends.milvus import MilvusAdapter

    adapter = MilvusAdapter.open(milvus_instances["folders"]["FLAT"])
    milvus_instances["opened"].append(adapter)
    return adapter


@pytest.fixture(scope="session")
def milvus_ann(milvus_instances: dict[str, Any]) -> Any:
    from backends.milvus import MilvusAdapter

    adapter = MilvusAdapter.open(milvus_instances["folders"]["HNSW"])
    milvus_instances["opened"].append(adapter)
    return adapter


def create_milvus_collection(uri: str, name: str, rows: list[dict[str, Any]], vectors: Any, index_type: str) -> None:
    """Collection ``name`` at ``uri``, made with pymilvus directly as another job would: the
    licence rows (tests/backends/attached.py) under their own field names, ``team`` the partition
    key, their vectors in ``emb`` behind a COSINE ``index_type`` index."""
    import numpy as np
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri)
    try:
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("doc_key", DataType.VARCHAR, is_primary=True, max_length=512)
        for field in ("body", "src", "digest"):
            schema.add_field(field, DataType.VARCHAR, max_length=65_535)
        schema.add_field("team", DataType.VARCHAR, max_length=64, is_partition_key=True)
        for field in ("prio", "first_line", "last_line"):
            schema.add_field(field, DataType.INT64)
        schema.add_field("emb", DataType.FLOAT_VECTOR, dim=int(vectors.shape[1]))
        params = client.prepare_index_params()
        build = {"M": 8, "efConstruction": 64} if index_type == "HNSW" else {}
        params.add_index(field_name="emb", index_type=index_type, metric_type="COSINE", params=build)
        client.create_collection(name, schema=schema, index_params=params)
        client.insert(
            name,
            [{**row, "emb": np.asarray(v, dtype=np.float32).tolist()} for row, v in zip(rows, vectors, strict=True)],
        )
        client.flush(name)
    finally:
        client.close()


@pytest.fixture(scope="session")
def attached_milvus(attached_sources: dict[str, Any]) -> Iterator[Any]:  # noqa: F811
    """The licence rows as a Milvus collection RACE did not load, attached with every custody field."""
    if not milvus_available():
        pytest.skip("the race[milvus] extra (pymilvus, milvus-lite) is not installed")
    from milvus_lite import server_manager_instance

    from backends.mapping import FieldMapping
    from backends.milvus.attached import AttachedMilvusAdapter
    from tests.backends.attached import FULL_MAPPING

    uri = str(attached_sources["root"] / "milvus_lake.db")
    create_milvus_collection(uri, "tickets", attached_sources["rows"], attached_sources["vectors"], "FLAT")
    adapter = AttachedMilvusAdapter(
        name="lake",
        uri=uri,
        collection="tickets",
        mapping=FieldMapping.model_validate({**FULL_MAPPING, "metadata": ["prio", "team"]}),
        embedder=attached_sources["embedder"],
    )
    try:
        yield adapter
    finally:
        adapter.close()
        server_manager_instance.release_server(uri)
