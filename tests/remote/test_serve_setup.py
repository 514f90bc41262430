"""``race serve`` does its set-up before it binds the port: every adapter's, for every mode,
and the compiled query path of the models they loaded; a set-up that fails is left for the
scans to report."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from backends.models import embedding
from backends.models.embedding import MiniLMEmbedder
from race.serving import serve as serving
from race.serving.serve import running_server, set_up_adapters


class _Recording:
    def __init__(self, fails: bool = False) -> None:
        self.calls: list[frozenset[str] | None] = []
        self.fails = fails

    def warm(self, modes: frozenset[str] | None = None) -> None:
        self.calls.append(modes)
        if self.fails:
            raise RuntimeError("the table is gone")


def test_every_adapter_is_set_up_and_a_failure_is_left_to_the_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[bool] = []
    monkeypatch.setattr(embedding, "compile_forward_passes", lambda: compiled.append(True) or 0)
    good, broken = _Recording(), _Recording(fails=True)
    set_up_adapters({"good": good, "broken": broken})  # type: ignore[dict-item]
    assert good.calls == [None] and broken.calls == [None]
    assert compiled == [True]


def test_a_served_index_is_set_up_before_its_first_request(index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numba")
    model = MiniLMEmbedder()._model()
    kept = list(model.compiled)
    model.compiled.clear()
    seen: list[str] = []
    real = serving.set_up_adapters
    monkeypatch.setattr(serving, "set_up_adapters", lambda adapters: (seen.extend(adapters), real(adapters)))
    try:
        with running_server(index_dir, set_up=True) as server:
            assert model.compiled, "the query path was not compiled in set-up"
            host, port = server.server_address
            contracts = httpx.get(f"http://{host}:{port}/v1/contracts", timeout=30.0)
            assert contracts.status_code == 200
        assert "lancedb" in seen and "tantivy" in seen
    finally:
        model.compiled[:] = kept or model.compiled
