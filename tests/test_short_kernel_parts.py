"""The parts of the compiled path for short texts, each against the numpy code it replaces, bit
for bit: numpy's float32 row sums and the layer norm on them (``float32_sums``), self-attention
(``short_attention``) and GELU on the host's vectors (``vector_gelu``), including the inputs
where each leaves the work to numpy and the edges of GELU's erf table."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("numba")

from backends.models import attention
from backends.models.embedding import MiniLMEmbedder
from backends.models.encoder import _ERF_LIMIT, _ERF_STEP, _NORM_BOUND, _gelu, _layer_norm
from backends.models.float32_sums import _pairwise_sum_compiled, add_layer_norm
from backends.models.vector_gelu import VectorGelu, host_gelu

_SCALES = (1e-3, 1.0, 1e3)


def _bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x, dtype=np.float32).tobytes()


def test_row_sums_are_numpys_for_every_length() -> None:
    """Lengths around each of numpy's branches: under 8, blocks of 8 up to 128, halves above."""
    rng = np.random.default_rng(11)
    for count in [*range(1, 300), 384, 511, 512, 1000, 1536, 4097]:
        for scale in _SCALES:
            row = (rng.standard_normal(count) * scale).astype(np.float32)
            assert np.float32(_pairwise_sum_compiled(row, 0, count)).tobytes() == row.sum().tobytes(), count
        zeros = np.full(count, -0.0, dtype=np.float32)  # numpy's sum starts at +0.0
        assert np.float32(_pairwise_sum_compiled(zeros, 0, count)).tobytes() == zeros.sum().tobytes(), count


@pytest.mark.parametrize("width", [1, 7, 48, 384, 1536])
def test_layer_norm_with_its_residual_is_numpys(width: int) -> None:
    rng = np.random.default_rng(width)
    weight, bias = rng.standard_normal((2, width)).astype(np.float32)
    for scale in (1e-2, 1.0, 30.0):
        x = (rng.standard_normal((13, width)) * scale).astype(np.float32)
        residual = rng.standard_normal((13, width)).astype(np.float32)
        x[0], residual[0] = 0.0, -0.0  # a row of zeros: variance 0
        x[1], residual[1] = 2.5, 0.0  # a constant row
        expected = _layer_norm(x + residual, weight, bias, 1e-12)
        assert _bits(add_layer_norm(x, residual, weight, bias, 1e-12)) == _bits(expected)
    zeros, ones = np.full((2, width), -0.0, dtype=np.float32), np.ones(width, dtype=np.float32)
    signed = _layer_norm(zeros + zeros, ones, zeros[0], 1e-12)  # every sign of zero as numpy's
    assert _bits(add_layer_norm(zeros, zeros, ones, zeros[0], 1e-12)) == _bits(signed)


@pytest.mark.parametrize(("heads", "dim"), [(12, 32), (4, 12), (1, 8)])
def test_attention_is_numpys_for_every_length(heads: int, dim: int) -> None:
    """Random projections of 1 to 64 tokens at three scales, and longer texts (BLAS's products,
    heads in groups), against ``_Bert._attend``. A near-uniform softmax row can have a norm
    within 1e-12 of a power of two: that text's attention is left to numpy (``None``), which a
    few of these cases are."""
    model = dataclasses.replace(MiniLMEmbedder()._model(), heads=heads)
    rng = np.random.default_rng(heads * 100 + dim)
    left = 0
    for tokens in [*range(1, 65), 65, 100, 181, 256, 512]:
        for scale in _SCALES:
            qkv = (rng.standard_normal((tokens, 3 * heads * dim)) * scale).astype(np.float32)
            context = attention.attend(qkv, heads)
            left += context is None
            if context is not None:
                assert _bits(context) == _bits(model._attend(qkv)), (tokens, scale)
    assert left <= 4


def test_attention_leaves_a_row_near_a_power_of_two_to_numpy() -> None:
    heads, dim, tokens = 2, 4, 3
    qkv = np.random.default_rng(5).standard_normal((tokens, 3 * heads * dim)).astype(np.float32)
    qkv[1, :dim] = [3.0, 4.0, 0.0, 0.0]  # norm 5: 5 / 1.25 = 4, a power of two
    ints, steps = np.empty((heads, tokens, dim)), np.empty((heads, tokens))
    assert not attention._row_grids_compiled(qkv, 0, 1.25, ints, steps)
    assert attention._row_grids_compiled(qkv, 0, _NORM_BOUND - math.sqrt(dim), ints, steps)
    exps = np.ones((heads, tokens, tokens), dtype=np.float32)
    exps[0, 0] = [1.0, 0.0, 0.0]  # a row of norm 1: 1 / 0.5 = 2
    assert not attention._probability_grids_compiled(exps, 0.5, np.empty((heads, tokens, tokens)), steps)
    values, value_steps = np.empty((heads, dim, tokens)), np.empty((heads, dim))
    qkv[:, 2 * heads * dim] = [0.0, 3.0, 4.0]  # the first value column: norm 5
    assert not attention._column_grids_compiled(qkv, 2 * heads * dim, 1.25, values, value_steps)


def _gelu_edges() -> np.ndarray:
    """Inputs at every 64th cell edge of the erf table, one float32 step either side, the
    clamp, zeros, infinities (-inf gives NaN on both), subnormals, huge values, and a spread of ordinary ones."""
    edges = (np.arange(0, int(2 * _ERF_LIMIT / _ERF_STEP) + 1, 64) * _ERF_STEP - _ERF_LIMIT) * math.sqrt(2.0)
    near = edges.astype(np.float32)
    around = np.concatenate([near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))])
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1e-38, 3e38, -3e38, _ERF_LIMIT * math.sqrt(2.0), -8.49, 8.49],
        dtype=np.float32,
    )
    spread = (np.random.default_rng(9).standard_normal(20_000) * 3).astype(np.float32)
    return np.concatenate([around.astype(np.float32), special, spread])


@pytest.mark.parametrize("lanes", [8, 4, 2, 1])
def test_vector_gelu_is_numpys(lanes: int) -> None:
    gelu = VectorGelu.compile(lanes)
    x = _gelu_edges()
    with np.errstate(invalid="ignore"):  # numpy warns of the NaN that -inf gives
        assert _bits(gelu(x)) == _bits(_gelu(x))
        for count in range(0, 20):  # whole vectors and every remainder
            assert _bits(gelu(x[:count])) == _bits(_gelu(x[:count]))
    block = x[-1536 * 12 :].reshape(12, -1)
    assert _bits(host_gelu()(block)) == _bits(_gelu(block))


def test_no_compiled_function_calls_one_of_another_module() -> None:
    """numba's cache keeps a caller's code, callees included, until the caller's own file
    changes: a compiled function calling one defined in another module would go stale when only
    that module is edited. Every ``*_compiled`` a module names, it defines."""
    import re
    from pathlib import Path

    import backends.models

    for module in sorted(Path(backends.models.__file__).parent.glob("*.py")):
        source = module.read_text(encoding="utf-8")
        named = set(re.findall(r"\b(_\w+_compiled)\b", source))
        defined = set(re.findall(r"^(_\w+_compiled) = ", source, flags=re.MULTILINE))
        assert named <= defined, (module.name, sorted(named - defined))
