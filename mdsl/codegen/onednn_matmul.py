"""Which GEMMs oneDNN's matmul computes in the C target, and their weights in its layout.

A GEMM of a constant float32 B with at least `MANY_ROWS` rows, or at least `MIN_ROWS`
and a K of at least `LONG_K` (static sizes, A row-contiguous, not transposed, alpha 1,
one matrix) runs as one oneDNN `matmul` primitive whose weights are `format_tag_any`:
the primitive's blocked layout, filled once here at plan time. A and C stay mdsl's
row-major buffers; the epilogue (bias, activation, residual) is applied by mdsl after
the product. The class (docs/cpu-kernels.md, "GEMMs by oneDNN's matmul"): first measured
against the packed GEMM of then (32-column panels), oneDNN was 4-9% faster at M=128,
K=768 or 3072. Against today's packed kernel (two 16-column panels per 12 x 32 tile),
on a 2-vCPU AVX-512 Xeon at 1 thread, the packed kernel is 2-5% faster for K <= 768 at
M = 128-197, even or behind at K >= 2048, and behind at M = 1024; at 2 threads they
were even. Without AVX-512 oneDNN's matmul is `gemm:jit`, which packs B on every call
and was no faster than the packed kernel on a Zen 3 core, so nothing is routed there
(only `FAST_IMPLS` are). `MDSL_ONEDNN=0` keeps the hand-written kernel everywhere.

A batched product of two run-time operands (attention's `Q·Kᵀ` and `P·V`) with M, N
and K of at least `BATCHED_MIN_SIDE` runs as one oneDNN matmul over the whole batch,
every operand described by its strides (a transposed or head-split operand is read in
place, a broadcast batch dim has size 1) and `alpha` as a linear post-op; an epilogue
(GPT-2's causal mask) runs over the whole result after it. Against
OpenBLAS called per batch entry (1 thread, thread CPU time): 12 x 128x128x64 0.82x,
12 x 128x64x128 0.81x; 64-sided products about even, smaller ones slower (kept on BLAS).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from mdsl.codegen import kir, onednn
from mdsl.codegen.packing import constant_value
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Tensor

MIN_ROWS = 128  # below it the packed kernel stays (smaller M was not measured)
MANY_ROWS = 512  # from here oneDNN at any K (of at least MIN_SIDE)
LONG_K = 2048  # or from MIN_ROWS with a K this long
MIN_SIDE = 256  # K and N
MATMUL_DECLARATION = """
dnnl_status_t dnnl_matmul_primitive_desc_create(dnnl_primitive_desc_t *pd,
    dnnl_engine_t engine, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t bias_desc,
    const_dnnl_memory_desc_t dst_desc, dnnl_primitive_attr_t attr);
"""
FAST_IMPLS = ("brg",)  # its brgemm kernels; not `gemm:jit` or `ref`


@functools.lru_cache(maxsize=1)
def _ffi_lib():
    import cffi

    path = onednn.library_path()
    if path is None:
        return None
    ffi = cffi.FFI()
    ffi.cdef(onednn.DECLARATIONS + MATMUL_DECLARATION)
    return ffi, ffi.dlopen(str(path))


class _MatMul(onednn._Conv):
    """A matmul's primitive descriptor, made through cffi at plan time: [m, k] @ [k, n]
    with row-major A and C and weights `any`, or the strided tensors of `layout`
    (`strided_layout`) scaled by `alpha`. The memory-desc helpers and the weight
    reorder are the convolution's."""

    def __init__(self, m: int, k: int, n: int, layout=None, alpha: float = 1.0):
        self.ffi, self.lib = _ffi_lib()
        self.engine = self.ffi.new("dnnl_engine_t *")
        self.pd = self.ffi.new("dnnl_primitive_desc_t *")
        if layout is None:
            mds = (self.md((m, k)), self.md((k, n), onednn.FORMAT_TAG_ANY), self.md((m, n)))
        else:
            mds = tuple(self.strided_md(dims, strides) for dims, strides in layout)
        attr = self.attr((("linear", alpha, 0.0),) if alpha != 1.0 else ())
        self.ok = self.lib.dnnl_engine_create(self.engine, onednn.CPU, 0) == 0 and (
            self.lib.dnnl_matmul_primitive_desc_create(
                self.pd, self.engine[0], mds[0], mds[1], self.ffi.NULL, mds[2], attr
            )
            == 0
        )

    def strided_md(self, dims, strides):
        out = self.ffi.new("dnnl_memory_desc_t *")
        self.lib.dnnl_memory_desc_create_with_strides(
            out, len(dims), self.dims(dims), onednn.F32, self.dims(strides)
        )
        return out[0]


@functools.lru_cache(maxsize=512)
def probe_matmul(m: int, k: int, n: int) -> str | None:
    """oneDNN's kernel for an [m, k] @ [k, n] float32 matmul, or None when oneDNN is
    missing or refuses it."""
    if _ffi_lib() is None:
        return None
    mm = _MatMul(m, k, n)
    return mm.impl() if mm.ok else None


def _routed(g: kir.Gemm) -> bool:
    """Whether `g` is of the shape class oneDNN's matmul computes faster."""
    if g.dtype != DType.float32 or g.batch_shape or g.trans_a or g.alpha != 1.0:
        return False
    if any(isinstance(v, Dim) for v in (g.m, g.n, g.k, g.lda)):
        return False
    many_rows = g.m >= MANY_ROWS or (g.m >= MIN_ROWS and g.k >= LONG_K)
    return many_rows and min(g.n, g.k) >= MIN_SIDE and g.lda == g.k


def with_onednn_matmul(ctx, g: kir.Gemm, b: Tensor) -> kir.Gemm:
    """`g` computed by oneDNN (`onednn` names its kernel, `packed_b` holds B in the
    primitive's layout) when oneDNN is available, `g` is of the routed class and B is a
    float32 constant; else `g` unchanged."""
    if ctx.derived_constant is None or not onednn.available() or not _routed(g):
        return g
    value = constant_value(b)
    if value is None or value.dtype != np.float32 or len(b.shape) != 2:
        return g
    impl = probe_matmul(g.m, g.k, g.n)
    if impl is None or not impl.startswith(FAST_IMPLS):
        return g
    matrix = np.ascontiguousarray(value.T if g.trans_b else value)
    mm = _MatMul(g.m, g.k, g.n)
    blocked = mm.reordered_weights((g.k, g.n), matrix)
    g.packed_b = ctx.derived_constant(blocked, DType.float32)
    g.onednn = impl
    g.onednn_b_elems = blocked.size
    g.onednn_b_layout = mm.layout_words(onednn.QUERY_WEIGHTS_MD)
    return g


BATCHED_MIN_SIDE = 64  # M, N and K of each product of a batch oneDNN computes


def with_onednn_batched(g: kir.Gemm) -> kir.Gemm:
    """`g` computed by one oneDNN matmul over its whole batch (see the module doc) when
    oneDNN is available, `g` is a static float32 batched product and oneDNN picks its
    brgemm kernel; else `g`. An epilogue (a mask, a scale that is not `alpha`) runs
    over the whole result after the product."""
    if not onednn.available() or g.dtype != DType.float32:
        return g
    sizes = (g.m, g.n, g.k, g.lda, g.ldb, *g.batch_shape, *g.a.strides, *g.b.strides)
    if g.onednn or g.packed_b or any(isinstance(v, Dim) for v in (*sizes, *g.out.strides)):
        return g
    if math.prod(g.batch_shape) < 2 or min(g.m, g.n, g.k) < BATCHED_MIN_SIDE:
        return g
    impl = probe_strided(strided_layout(g), float(g.alpha))
    if impl is None or not impl.startswith(FAST_IMPLS):
        return g
    g.onednn = impl
    return g


def strided_layout(g: kir.Gemm) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """(dims, strides) of A, B and C of the batched GEMM `g` as oneDNN tensors: the
    batch dims, then [M, K], [K, N] and [M, N]; a transposed operand swaps its matrix
    strides, a batch dim an operand broadcasts (stride 0) has size 1 there."""

    def operand(strides, rows, cols, ld, transposed):
        batch = tuple(1 if s == 0 else size for s, size in zip(strides, g.batch_shape))
        matrix = (1, ld) if transposed else (ld, 1)
        # a size-1 dim gets the stride it would have in a dense tensor (the span of
        # the dims inside it): oneDNN's brgemm refuses other ones (a slower kernel runs)
        span, outer = max(rows * matrix[0], cols * matrix[1]), []
        for size, stride in reversed(list(zip(batch, strides))):
            outer.insert(0, stride if size > 1 else span)
            span = max(span, size * outer[0])
        return (*batch, rows, cols), (*outer, *matrix)

    return (
        operand(g.a.strides, g.m, g.k, g.lda, g.trans_a),
        operand(g.b.strides, g.k, g.n, g.ldb, g.trans_b),
        ((*g.batch_shape, g.m, g.n), (*g.out.strides, g.n, 1)),
    )


@functools.lru_cache(maxsize=512)
def probe_strided(layout, alpha: float) -> str | None:
    """oneDNN's kernel for the strided matmul `layout` scaled by `alpha`, or None."""
    if _ffi_lib() is None:
        return None
    mm = _MatMul(0, 0, 0, layout, alpha)
    return mm.impl() if mm.ok else None
