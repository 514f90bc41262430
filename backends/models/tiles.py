"""A short text's exact layer products on register tiles: LLVM IR written for the host's
vector width and compiled by llvmlite (numba's compiler library, the extra ``fast``).

``out = ints @ weights``, where ``ints`` (float64 integers, one row per token) is on the
activations' grid and ``weights`` holds a layer's weight integers as float32 (exact: checked
by ``pack``). The weights are packed in blocks of ``Tiles.columns`` output columns, each block
``depth`` rows of ``columns`` values, so a block streams through once, in order, for every
tile of rows. A tile keeps ``rows`` x ``columns`` float64 sums in vector registers (14 x 16 in
28 of AVX-512's 32 registers; 6 x 8 with AVX2), and per step of the depth loads a block row,
widens it to float64, and adds one broadcast activation times it to each row's sums.

Every product is an exact integer sum (``encoder._exact_matmul``), so the order of its terms
and fused multiply-adds cannot show: these sums are numpy's to the bit. At 12 tokens a layer's
weights are read once per query, and the products run at the rate the cache streams them
(``benchmarks/bench_query_embedding.py``): 48.1 GFLOP/s for a query's 24 products on this
machine, where numba's loops over a 4 x 4 tile, the kernel before these, reached 24.3 in a run on the
same machine before they were replaced.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from backends.models.encoder import FloatArray, WideArray

_Pointer, _Size = ctypes.c_void_p, ctypes.c_int64
_Kernel = ctypes.CFUNCTYPE(None, _Pointer, _Size, _Size, _Pointer, _Size, _Pointer, _Size)
"""``products(ints, rows, depth, packed, blocks, out, out_stride)``; ctypes releases the GIL."""


_AHEAD = 4096
"""Bytes of a block read ahead of the tile (a software prefetch each step): without it the
weights came at 4.6 GB/s, with it at 7.7 (1 KB ahead: 6.7), in a run made while this was
written; a step reads ``8 * lanes`` bytes of them."""


def compile_ir(source: str) -> Any:
    """llvmlite's execution engine for the LLVM IR ``source``, compiled for this host's CPU at
    full optimization; a function's code lives as long as the engine does."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3, codemodel="jitdefault"
    )
    module = llvm.parse_assembly(source)
    module.verify()
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return engine


def vector_lanes() -> int:
    """float64 values to one of this host's vector registers: 8 with AVX-512, 4 with AVX2,
    2 otherwise (LLVM lowers vectors wider than the host's registers)."""
    features = llvm.get_host_cpu_features()
    return 8 if features.get("avx512f") else 4 if features.get("avx2") else 2


def _tile(rows: int, lanes: int) -> str:
    """``@tile{rows}(x, x_stride, block, depth, out, out_stride)``: ``rows`` x ``2 * lanes`` sums
    of ``depth`` terms, stored at ``out``; ``depth`` may be 0 (the sums are then 0)."""
    vector, floats = f"<{lanes} x double>", f"<{lanes} x float>"
    halves = range(2)
    lines = [
        f"define internal void @tile{rows}(ptr noalias readonly %x, i64 %xs, ptr noalias readonly %w, i64 %depth,"
        " ptr noalias %out, i64 %os) #0 {",
        "entry:",
        "  %empty = icmp eq i64 %depth, 0",
        "  br i1 %empty, label %exit, label %loop",
        "loop:",
        "  %k = phi i64 [0, %entry], [%next, %loop]",
    ]
    lines += [
        f"  %s{r}_{h} = phi {vector} [zeroinitializer, %entry], [%t{r}_{h}, %loop]" for r in range(rows) for h in halves
    ]
    lines.append(f"  %wk = mul i64 %k, {2 * lanes}")
    lines += [  # past the block's end it reads the next block's first rows; a prefetch never faults
        f"  %pk = add i64 %wk, {_AHEAD // 4}",
        "  %pp = getelementptr float, ptr %w, i64 %pk",
        "  call void @llvm.prefetch.p0(ptr %pp, i32 0, i32 3, i32 1)",
    ]
    for h in halves:
        lines += [
            f"  %wi{h} = add i64 %wk, {h * lanes}",
            f"  %wp{h} = getelementptr float, ptr %w, i64 %wi{h}",
            f"  %wf{h} = load {floats}, ptr %wp{h}, align 4",
            f"  %w{h} = fpext {floats} %wf{h} to {vector}",
        ]
    for r in range(rows):
        lines += [
            f"  %xr{r} = mul i64 %xs, {r}",
            f"  %xi{r} = add i64 %xr{r}, %k",
            f"  %xp{r} = getelementptr double, ptr %x, i64 %xi{r}",
            f"  %xv{r} = load double, ptr %xp{r}, align 8",
            f"  %xe{r} = insertelement {vector} poison, double %xv{r}, i32 0",
            f"  %xb{r} = shufflevector {vector} %xe{r}, {vector} poison, <{lanes} x i32> zeroinitializer",
        ]
        for h in halves:
            lines += [
                f"  %m{r}_{h} = fmul contract {vector} %xb{r}, %w{h}",
                f"  %t{r}_{h} = fadd contract {vector} %s{r}_{h}, %m{r}_{h}",
            ]
    lines += ["  %next = add i64 %k, 1", "  %more = icmp ult i64 %next, %depth"]
    lines.append("  br i1 %more, label %loop, label %exit")
    lines.append("exit:")
    lines += [
        f"  %f{r}_{h} = phi {vector} [zeroinitializer, %entry], [%t{r}_{h}, %loop]" for r in range(rows) for h in halves
    ]
    for r in range(rows):
        for h in halves:
            lines += [
                f"  %or{r}_{h} = mul i64 %os, {r}",
                f"  %oo{r}_{h} = add i64 %or{r}_{h}, {h * lanes}",
                f"  %op{r}_{h} = getelementptr double, ptr %out, i64 %oo{r}_{h}",
                f"  store {vector} %f{r}_{h}, ptr %op{r}_{h}, align 8",
            ]
    return "\n".join([*lines, "  ret void", "}"])


def _driver(tile_rows: int, columns: int) -> str:
    """``@products``: for each block of columns (read from memory once, then from cache), the
    rows in the fewest tiles of at most ``tile_rows``, of sizes differing by at most one."""
    sizes = " ".join(f"i64 {r}, label %tile{r}" for r in range(1, tile_rows + 1))
    lines = [
        "define void @products(ptr %x, i64 %rows, i64 %depth, ptr %w, i64 %blocks, ptr %out, i64 %os) #0 {",
        "entry:",
        "  %none = icmp eq i64 %blocks, 0",
        "  %norows = icmp eq i64 %rows, 0",
        "  %nothing = or i1 %none, %norows",
        "  br i1 %nothing, label %done, label %setup",
        "setup:",
        f"  %rows1 = add i64 %rows, {tile_rows - 1}",
        f"  %tiles = udiv i64 %rows1, {tile_rows}",
        "  br label %block",
        "block:",
        "  %b = phi i64 [0, %setup], [%b1, %blockend]",
        f"  %wstep = mul i64 %depth, {columns}",
        "  %wo = mul i64 %b, %wstep",
        "  %wb = getelementptr float, ptr %w, i64 %wo",
        f"  %oc = mul i64 %b, {columns}",
        "  br label %rowtile",
        "rowtile:",
        "  %r = phi i64 [0, %block], [%r1, %tiled]",
        "  %t = phi i64 [0, %block], [%t1, %tiled]",
        "  %left = sub i64 %rows, %r",
        "  %ahead = sub i64 %tiles, %t",
        "  %left1 = add i64 %left, %ahead",
        "  %left2 = sub i64 %left1, 1",
        "  %size = udiv i64 %left2, %ahead",
        "  %xo = mul i64 %r, %depth",
        "  %xp = getelementptr double, ptr %x, i64 %xo",
        "  %or = mul i64 %r, %os",
        "  %oo = add i64 %or, %oc",
        "  %op = getelementptr double, ptr %out, i64 %oo",
        f"  switch i64 %size, label %tiled [ {sizes} ]",
    ]
    for r in range(1, tile_rows + 1):
        lines += [
            f"tile{r}:",
            f"  call void @tile{r}(ptr %xp, i64 %depth, ptr %wb, i64 %depth, ptr %op, i64 %os)",
            "  br label %tiled",
        ]
    lines += [
        "tiled:",
        "  %r1 = add i64 %r, %size",
        "  %t1 = add i64 %t, 1",
        "  %rmore = icmp ult i64 %r1, %rows",
        "  br i1 %rmore, label %rowtile, label %blockend",
        "blockend:",
        "  %b1 = add i64 %b, 1",
        "  %bmore = icmp ult i64 %b1, %blocks",
        "  br i1 %bmore, label %block, label %done",
        "done:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Tiles:
    """The compiled products for one tile shape: ``rows`` x ``columns`` sums, ``lanes``
    float64 values to a vector register."""

    rows: int
    lanes: int
    _kernel: Callable[..., None]
    _engine: object  # llvmlite's execution engine: the kernel's code lives as long as it does

    @property
    def columns(self) -> int:
        return 2 * self.lanes

    @classmethod
    def compile(cls, rows: int, lanes: int) -> Tiles:
        """The IR for tiles of ``rows`` x ``2 * lanes``, compiled for this host's CPU."""
        bits = 64 * lanes
        source = "\n\n".join(
            [
                *(_tile(r, lanes) for r in range(1, rows + 1)),
                _driver(rows, 2 * lanes),
                "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
                f'attributes #0 = {{ nounwind "prefer-vector-width"="{bits}" "min-legal-vector-width"="{bits}" }}',
            ]
        )
        engine = compile_ir(source)
        return cls(rows, lanes, _Kernel(engine.get_function_address("products")), engine)

    def pack(self, weights: WideArray) -> FloatArray | None:
        """``weights`` (depth, outputs) as float32 blocks (blocks, depth, columns), zero past the
        last output; ``None`` where a weight integer is not exact in float32."""
        depth, outputs = weights.shape
        blocks = -(-outputs // self.columns)
        packed = np.zeros((depth, blocks * self.columns), dtype=np.float32)
        packed[:, :outputs] = weights
        if not np.array_equal(packed[:, :outputs], weights):
            return None
        return np.ascontiguousarray(packed.reshape(depth, blocks, self.columns).transpose(1, 0, 2))

    def __call__(self, ints: WideArray, packed: FloatArray, out: WideArray) -> None:
        """``out[:, :outputs] = ints @ weights``: ``out`` has ``blocks * columns`` columns."""
        rows, depth = ints.shape
        blocks = packed.shape[0]
        if not (
            ints.flags.c_contiguous and out.flags.c_contiguous and packed.flags.c_contiguous
            and ints.dtype == out.dtype == np.float64 and packed.dtype == np.float32
            and packed.shape[1:] == (depth, self.columns) and out.shape == (rows, blocks * self.columns)
        ):  # fmt: skip
            raise ValueError("tile products need C-contiguous float64 rows, packed float32 blocks and a matching out")
        self._kernel(ints.ctypes.data, rows, depth, packed.ctypes.data, blocks, out.ctypes.data, out.shape[1])


@functools.cache
def host_tiles() -> Tiles:
    """Tiles for this host: 14 x 16 in 28 of AVX-512's 32 vector registers, 6 x 8 in 12 of
    AVX2's 16, 6 x 4 otherwise."""
    lanes = vector_lanes()
    return Tiles.compile(14 if lanes == 8 else 6, lanes)
