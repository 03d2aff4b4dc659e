"""Which GEMMs oneDNN's matmul computes in the C target, and their weights in its layout.

A GEMM of a constant float32 B with at least `MIN_ROWS` rows (static sizes, A
row-contiguous, not transposed, alpha 1, one matrix) runs as one oneDNN `matmul`
primitive whose weights are `format_tag_any`: the primitive's blocked layout, filled
once here at plan time. A and C stay mdsl's row-major buffers; the epilogue (bias,
activation, residual) is applied by mdsl after the product. Measured on a shared 2-core
AVX-512 Xeon, 1 thread, thread CPU time, against mdsl's packed GEMM
(`benchmarks/onednn_matmul.py`, docs/cpu-kernels.md): M=128, K=768, N=3072 and
M=128, K=3072, N=768 are 4-9% faster; smaller M was not measured and keeps the packed
kernel. `MDSL_ONEDNN=0` keeps the hand-written kernel everywhere.
"""

from __future__ import annotations

import functools

import numpy as np

from mdsl.codegen import kir, onednn
from mdsl.codegen.packing import constant_value
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Tensor

MIN_ROWS = 128  # the measured class (M=128); below it the packed kernel stays
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
    """A matmul's primitive descriptor (row-major A and C, weights `any`), made through
    cffi at plan time; the memory-desc helpers and the weight reorder are the
    convolution's."""

    def __init__(self, m: int, k: int, n: int):
        self.ffi, self.lib = _ffi_lib()
        self.engine = self.ffi.new("dnnl_engine_t *")
        self.pd = self.ffi.new("dnnl_primitive_desc_t *")
        self.ok = self.lib.dnnl_engine_create(self.engine, onednn.CPU, 0) == 0 and (
            self.lib.dnnl_matmul_primitive_desc_create(
                self.pd,
                self.engine[0],
                self.md((m, k)),
                self.md((k, n), onednn.FORMAT_TAG_ANY),
                self.ffi.NULL,
                self.md((m, n)),
                self.ffi.NULL,
            )
            == 0
        )


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
    return g.m >= MIN_ROWS and min(g.n, g.k) >= MIN_SIDE and g.lda == g.k


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
