"""GELU of a short text's intermediate activations on the host's vectors: LLVM IR compiled by
llvmlite (the extra ``fast``), with ``encoder._gelu``'s bits.

Each element takes ``encoder._gelu``'s operations in its order, in float64, with no fused
multiply-add (the IR's multiplies and adds carry no ``contract`` flag): the argument scaled
and clamped to the erf table's range, the cell and its local ``t``, the cell's cubic by
Horner's rule, then ``(erf + 1) * x * 0.5`` rounded to float32. A vector of ``lanes``
elements reads its cells' coefficients with gathers; the elements past the last whole vector
take the same code one at a time.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.models.encoder import _ERF_C0, _ERF_C1, _ERF_C2, _ERF_C3, _ERF_LIMIT, _ERF_STEP, FloatArray
from backends.models.tiles import compile_ir, vector_lanes

_Pointer, _Size = ctypes.c_void_p, ctypes.c_int64
_Kernel = ctypes.CFUNCTYPE(None, _Pointer, _Size, _Pointer, _Pointer, _Pointer, _Pointer, _Size, _Pointer)
"""``gelu(x, n, c0, c1, c2, c3, last_cell, out)``."""


def _double(value: float) -> str:
    """An IR double constant with exactly ``value``'s bits."""
    return f"0x{np.float64(value).view(np.uint64):016X}"


def _elements(lanes: int, at: str) -> list[str]:
    """The IR for ``lanes`` elements from index ``%{at}`` (names suffixed ``at``)."""
    vector = f"<{lanes} x double>" if lanes > 1 else "double"
    ints = f"<{lanes} x i64>" if lanes > 1 else "i64"
    floats = f"<{lanes} x float>" if lanes > 1 else "float"
    bools = f"<{lanes} x i1>" if lanes > 1 else "i1"
    last = "%lasts" if lanes > 1 else "%last"

    def const(value: float) -> str:
        return _double(value) if lanes == 1 else f"splat (double {_double(value)})"

    lines = [
        f"  %xp{at} = getelementptr float, ptr %x, i64 %{at}",
        f"  %xf{at} = load {floats}, ptr %xp{at}, align 4",
        f"  %w{at} = fpext {floats} %xf{at} to {vector}",
        f"  %a{at} = fmul {vector} %w{at}, {const(1.0 / math.sqrt(2.0))}",
        f"  %alo{at} = fcmp ogt {vector} %a{at}, {const(-_ERF_LIMIT)}",
        f"  %b{at} = select {bools} %alo{at}, {vector} %a{at}, {vector} {const(-_ERF_LIMIT)}",
        f"  %bhi{at} = fcmp olt {vector} %b{at}, {const(_ERF_LIMIT)}",
        f"  %c{at} = select {bools} %bhi{at}, {vector} %b{at}, {vector} {const(_ERF_LIMIT)}",
        f"  %d{at} = fadd {vector} %c{at}, {const(_ERF_LIMIT)}",
        f"  %pos{at} = fmul {vector} %d{at}, {const(1.0 / _ERF_STEP)}",
        f"  %cell{at} = fptosi {vector} %pos{at} to {ints}",
        f"  %inside{at} = icmp slt {ints} %cell{at}, {last}",
        f"  %idx{at} = select {bools} %inside{at}, {ints} %cell{at}, {ints} {last}",
        f"  %start{at} = sitofp {ints} %idx{at} to {vector}",
        f"  %t{at} = fsub {vector} %pos{at}, %start{at}",
    ]
    for c in range(4):
        lines.append(f"  %cp{c}{at} = getelementptr double, ptr %c{c}, {ints} %idx{at}")
        if lanes > 1:
            lines.append(
                f"  %cv{c}{at} = call {vector} @llvm.masked.gather.v{lanes}f64.v{lanes}p0(<{lanes} x ptr> %cp{c}{at},"
                f" i32 8, <{lanes} x i1> splat (i1 true), {vector} poison)"
            )
        else:
            lines.append(f"  %cv{c}{at} = load double, ptr %cp{c}{at}, align 8")
    lines += [
        f"  %h0{at} = fmul {vector} %cv3{at}, %t{at}",
        f"  %h1{at} = fadd {vector} %h0{at}, %cv2{at}",
        f"  %h2{at} = fmul {vector} %h1{at}, %t{at}",
        f"  %h3{at} = fadd {vector} %h2{at}, %cv1{at}",
        f"  %h4{at} = fmul {vector} %h3{at}, %t{at}",
        f"  %erf{at} = fadd {vector} %h4{at}, %cv0{at}",
        f"  %g0{at} = fadd {vector} %erf{at}, {const(1.0)}",
        f"  %g1{at} = fmul {vector} %g0{at}, %w{at}",
        f"  %g2{at} = fmul {vector} %g1{at}, {const(0.5)}",
        f"  %g{at} = fptrunc {vector} %g2{at} to {floats}",
        f"  %op{at} = getelementptr float, ptr %out, i64 %{at}",
        f"  store {floats} %g{at}, ptr %op{at}, align 4",
    ]
    return lines


def _source(lanes: int) -> str:
    lines = [
        "define void @gelu(ptr noalias readonly %x, i64 %n, ptr noalias readonly %c0, ptr noalias readonly %c1,"
        " ptr noalias readonly %c2, ptr noalias readonly %c3, i64 %last, ptr noalias %out) #0 {",
        "entry:",
        f"  %last1 = insertelement <{lanes} x i64> poison, i64 %last, i32 0",
        f"  %lasts = shufflevector <{lanes} x i64> %last1, <{lanes} x i64> poison, <{lanes} x i32> zeroinitializer",
        f"  %whole = and i64 %n, {-lanes}",
        "  %some = icmp ugt i64 %whole, 0",
        "  br i1 %some, label %vectors, label %between",
        "vectors:",
        "  %v = phi i64 [0, %entry], [%vnext, %vectors]",
        *_elements(lanes, "v"),
        f"  %vnext = add i64 %v, {lanes}",
        "  %vmore = icmp ult i64 %vnext, %whole",
        "  br i1 %vmore, label %vectors, label %between",
        "between:",
        "  %left = icmp ult i64 %whole, %n",
        "  br i1 %left, label %singles, label %done",
        "singles:",
        "  %s = phi i64 [%whole, %between], [%snext, %singles]",
        *_elements(1, "s"),
        "  %snext = add i64 %s, 1",
        "  %smore = icmp ult i64 %snext, %n",
        "  br i1 %smore, label %singles, label %done",
        "done:",
        "  ret void",
        "}",
        f"declare <{lanes} x double> @llvm.masked.gather.v{lanes}f64.v{lanes}p0(<{lanes} x ptr>, i32, <{lanes} x i1>,"
        f" <{lanes} x double>)",
        f'attributes #0 = {{ nounwind "prefer-vector-width"="{64 * lanes}" "min-legal-vector-width"="{64 * lanes}" }}',
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class VectorGelu:
    """``encoder._gelu`` compiled for ``lanes`` float64 values at a time."""

    lanes: int
    _kernel: Callable[..., None]
    _engine: Any  # the code lives as long as the engine does

    @classmethod
    def compile(cls, lanes: int) -> VectorGelu:
        engine = compile_ir(_source(lanes))
        return cls(lanes, _Kernel(engine.get_function_address("gelu")), engine)

    def __call__(self, x: FloatArray) -> FloatArray:
        flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        out = np.empty_like(flat)
        tables = (_ERF_C0, _ERF_C1, _ERF_C2, _ERF_C3)
        self._kernel(flat.ctypes.data, flat.size, *(t.ctypes.data for t in tables), len(_ERF_C0) - 1, out.ctypes.data)
        return out.reshape(x.shape)


@functools.cache
def host_gelu() -> VectorGelu:
    return VectorGelu.compile(vector_lanes())
