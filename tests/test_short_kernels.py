"""The compiled path for short texts (``backends.models.kernels``): the same bits as numpy's
forward pass for every text it takes, on MiniLM and on a folder model, and set up only when
an engine is asked to (``compiled_queries``)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")

from backends.models import embedding, kernels
from backends.models.embedding import MiniLMEmbedder, compile_forward_passes
from backends.models.encoder import SHORT_ROWS, _Bert, _Grid, _Linear
from backends.models.folder import FolderEmbedder
from backends.models.kernels import CompiledKernels
from backends.models.tiles import Tiles, host_tiles
from race.engine import Engine
from tests.conftest import FIXTURES, load_plan
from tests.tiny_bert import write_tiny_bert


@pytest.fixture(scope="module")
def minilm() -> _Bert:
    return MiniLMEmbedder()._model()


@pytest.fixture(scope="module")
def short(minilm: _Bert) -> CompiledKernels:
    loaded = CompiledKernels.load(minilm)
    assert loaded is not None
    return loaded


def _real_texts() -> list[str]:
    """Windows of 1 to 40 words of text nobody here wrote (Debian changelogs), and odd ones."""
    lines = (FIXTURES / "realtext" / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
    words = " ".join(json.loads(line)["text"] for line in lines[:40]).split()
    texts = [" ".join(words[i : i + 1 + i % 40]) for i in range(0, 4000, 13)]
    return [*texts, "", "?", "naïve café – 東京 🙂", "x " * 30, "the quick brown fox jumps over the lazy dog"]


def _bits(model: _Bert, texts: list[str], short: CompiledKernels | None) -> bytes:
    return model.encode_batch(texts, short).tobytes()


def test_same_bits_as_numpy_for_every_short_text(minilm: _Bert, short: CompiledKernels) -> None:
    texts = _real_texts()
    lengths = {len(minilm.tokenizer.encode(t).ids) for t in texts}
    # Row counts in one tile, in two, and past the tiles (BLAS's products).
    assert {2, 3, 5, 12, 13} <= lengths and max(lengths) > SHORT_ROWS
    for text in texts:
        assert _bits(minilm, [text], None) == _bits(minilm, [text], short), text


def test_a_batch_of_short_texts_has_the_same_bits(minilm: _Bert, short: CompiledKernels) -> None:
    texts = ["replication lag", "a network partition heals", "which node is the leader?", "quorum"]
    assert sum(len(minilm.tokenizer.encode(t).ids) for t in texts) <= SHORT_ROWS
    assert _bits(minilm, texts, None) == _bits(minilm, texts, short)


def test_long_texts_have_the_same_bits(minilm: _Bert, short: CompiledKernels) -> None:
    """Past ``SHORT_ROWS`` tokens the products are BLAS's, the rest compiled: a batch as an
    index build embeds it (texts of up to the model's 256 tokens), and one long text."""
    words = " ".join(_real_texts()[:80]).split()
    texts = [" ".join(words[i : i + 40 + 7 * (i % 30)]) for i in range(0, 1600, 50)]
    assert max(len(minilm.tokenizer.encode(t).ids) for t in texts) >= 256
    assert _bits(minilm, texts, None) == _bits(minilm, texts, short)
    text = " ".join(["replication"] * 100)
    assert _bits(minilm, [text], None) == _bits(minilm, [text], short)


@pytest.mark.parametrize(("rows", "lanes"), [(14, 8), (6, 4), (6, 2), (3, 1)])
def test_tile_products_are_exact_sums_for_every_shape(rows: int, lanes: int) -> None:
    """Each tile shape ``host_tiles`` may choose (and one more), on rows up to 64 (whole tiles
    and every remainder), depths of 0, 1 and odd, and outputs past the last block."""
    tiles = Tiles.compile(rows, lanes)
    rng = np.random.default_rng(rows * 10 + lanes)
    for count in [*range(1, 2 * rows + 2), 64]:
        for depth, outputs in [(0, 5), (1, 1), (7, 20), (384, 2 * lanes * 3), (33, 17)]:
            # 384 terms of at most 2**20 * 2**24: every partial sum exact, as the grid keeps them
            ints = rng.integers(-(2**20), 2**20 + 1, size=(count, depth)).astype(np.float64)
            weights = rng.integers(-(2**24), 2**24 + 1, size=(depth, outputs)).astype(np.float64)
            packed = tiles.pack(weights)
            assert packed is not None
            out = np.full((count, packed.shape[0] * tiles.columns), np.nan)
            tiles(ints, packed, out)
            assert np.array_equal(out[:, :outputs], ints @ weights), (count, depth, outputs)
            assert not out[:, outputs:].any()


def test_tile_products_refuse_what_they_cannot_hold() -> None:
    tiles = host_tiles()
    assert tiles.pack(np.array([[2.0**24 + 1]])) is None  # 25 significant bits: not exact in float32
    packed = tiles.pack(np.ones((8, 3)))
    assert packed is not None
    with pytest.raises(ValueError, match="tile products"):
        tiles(np.ones((2, 7)), packed, np.empty((2, tiles.columns)))  # depth 7 against 8
    with pytest.raises(ValueError, match="tile products"):
        tiles(np.ones((2, 8)), packed, np.empty((2, tiles.columns + 1)))
    with pytest.raises(ValueError, match="tile products"):
        tiles(np.ones((8, 2)).T, packed, np.empty((2, tiles.columns)))  # not C-contiguous


def test_grid_near_a_power_of_two_is_left_to_numpy() -> None:
    ints, step = np.zeros((4, 8)), np.empty(1)
    row = np.array([[3.0, 4.0, 0, 0, 0, 0, 0, 0]], dtype=np.float32)  # norm 5
    assert not kernels._grid_compiled(row, 1.25, ints, step)  # 5 / 1.25 = 4: on a power of two
    x = np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32)
    bound = 2.0**26.5 - np.sqrt(8)
    assert kernels._grid_compiled(x, bound, ints, np.empty(3))
    grid = _Grid.of(x, axis=-1)
    assert np.array_equal(ints[:3], grid.ints)


def test_a_row_left_to_numpy_gives_numpy_bits(
    minilm: _Bert, short: CompiledKernels, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "leader election after a partition"
    expected = _bits(minilm, [text], None)
    monkeypatch.setattr(kernels, "_grid_compiled", lambda *_: False)
    assert _bits(minilm, [text], short) == expected


def test_weights_not_exact_in_float32_keep_the_numpy_path(minilm: _Bert) -> None:
    layer = minilm.layers[0]
    ints = layer.qkv.weight.ints.copy()
    ints[0, 0] = 2.0**25 + 1  # 26 significant bits
    wide = dataclasses.replace(layer.qkv, weight=dataclasses.replace(layer.qkv.weight, ints=ints))
    model = dataclasses.replace(minilm, layers=(dataclasses.replace(layer, qkv=wide), *minilm.layers[1:]), compiled=[])
    assert CompiledKernels.load(model) is None


def test_folder_model_has_the_same_bits(tmp_path: Path) -> None:
    folder = write_tiny_bert(tmp_path / "tiny-bert")
    model = FolderEmbedder(folder, name="tiny-bert")._model()
    short = CompiledKernels.load(model)
    assert short is not None
    for text in _real_texts()[:60]:
        assert _bits(model, [text], None) == _bits(model, [text], short), text


def test_compile_forward_passes_sets_up_every_loaded_model(minilm: _Bert) -> None:
    texts = ["replication lag after a network partition", "quorum"]
    expected = _bits(minilm, texts, None)
    assert compile_forward_passes() >= 1
    assert isinstance(minilm.compiled_path, CompiledKernels)
    assert MiniLMEmbedder().embed(texts).tobytes() == expected


def test_without_numba_nothing_is_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real(name, *a))
    assert embedding.compile_forward_passes() == 0


def test_a_compile_that_fails_leaves_the_numpy_path(
    minilm: _Bert, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_: _Bert) -> None:
        raise RuntimeError("no LLVM for this machine")

    monkeypatch.setattr(CompiledKernels, "load", broken)
    monkeypatch.setattr(embedding, "_LOADED", [minilm])
    kept = list(minilm.compiled)
    minilm.compiled.clear()
    try:
        assert embedding.compile_forward_passes() == 0
        assert minilm.compiled_path is None
    finally:
        minilm.compiled[:] = kept
    assert "texts embed with numpy" in caplog.text


def test_nothing_loaded_imports_no_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedding, "_LOADED", [])
    monkeypatch.setattr(importlib.util, "find_spec", lambda *_: pytest.fail("looked for numba"))
    assert embedding.compile_forward_passes() == 0


@pytest.mark.anyio
async def test_an_engine_asked_for_compiled_queries_gives_the_same_receipt(index_dir: Path, minilm: _Bert) -> None:
    plan = load_plan("showcase.json")
    kept = list(minilm.compiled)
    minilm.compiled.clear()
    try:
        plain = Engine.open(index_dir)
        before = (await plain.run(plan, cache=False)).normalized_bytes()
        assert not minilm.compiled  # a plain engine compiles nothing
        compiled = Engine.open(index_dir, compiled_queries=True)
        after = (await compiled.run(plan, cache=False)).normalized_bytes()
        assert minilm.compiled
    finally:
        minilm.compiled[:] = kept or minilm.compiled
    assert after == before


@pytest.mark.anyio
async def test_compiling_is_set_up_never_charged_to_the_deadline(
    index_dir: Path, minilm: _Bert, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compile made to take longer than the whole plan deadline (4 s against 3 s, which the
    # retrieval itself needs a small part of): the run is still satisfied, and the compile is
    # in operational.setup_ms, outside the deadline.
    real = CompiledKernels.load

    def slow(bert: _Bert) -> CompiledKernels | None:
        time.sleep(4.0)
        return real(bert)

    plan = load_plan("showcase.json")
    plan["budget"]["deadline_ms"] = 3000
    monkeypatch.setattr(CompiledKernels, "load", slow)
    kept = list(minilm.compiled)
    minilm.compiled.clear()
    try:
        receipt = await Engine.open(index_dir, compiled_queries=True).run(plan, cache=False)
        assert minilm.compiled
    finally:
        minilm.compiled[:] = kept or minilm.compiled
    assert all(o.status.value == "satisfied" for o in receipt.obligations if o.mandatory), receipt.obligations
    assert receipt.operational.setup_ms >= 4000


def test_linear_of_a_short_text_is_numpys(minilm: _Bert, short: CompiledKernels) -> None:
    x = np.random.default_rng(11).standard_normal((5, 384)).astype(np.float32)
    linear: _Linear = minilm.layers[2].intermediate
    assert short.layer(2)[2](x).tobytes() == linear(x).tobytes()


def test_set_up_compiles_every_kernel_before_any_text() -> None:
    """Nothing is left to compile at a text's first use (inside a plan's deadline): in a fresh
    process, after a model's set-up alone, every numba function the path calls from Python has
    its code (the functions only compiled code calls live in their callers' code)."""
    script = """
from backends.models import attention, float32_sums, kernels
from backends.models.embedding import MiniLMEmbedder
assert kernels.CompiledKernels.load(MiniLMEmbedder()._model()) is not None
inner = {"_pairwise_sum", "_block_sum", "_on_grid"}
called = [
    value
    for module in (kernels, attention, float32_sums)
    for value in vars(module).values()
    if hasattr(value, "signatures") and hasattr(value, "py_func") and value.py_func.__name__ not in inner
]
assert len(called) >= 8, called
print([d.py_func.__name__ for d in called if not d.signatures])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True)
    assert done.stdout.strip() == "[]"
