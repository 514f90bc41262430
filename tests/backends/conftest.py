"""Milvus collections for the backend suites: milvus-lite started by the tests in a temporary
folder (through the same pymilvus client a Milvus cluster uses), holding the bundled corpus
with the vectors of the session's LanceDB index, and stopped when the session ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import load_corpus
from race.bundled import BUNDLED_CORPUS

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
