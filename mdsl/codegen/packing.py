"""Weights packed at plan time into the layout a C kernel reads.

A GEMM whose right operand is a float32 constant runs as `mdsl_sgemm_packed` (the C
runtime's packed-weight kernel, `csrc/templates/c/packed_gemm.h.j2`) on `B` packed once
into panels of `PANEL` columns: panel p holds `B[k, p*PANEL + j]` at `(p*K + k)*PANEL + j`,
zero past the last column. BLAS packs B again on every call, which costs as much as the
product itself when M is small (a decoder step, a batch of one, a sequence of 17 tokens);
measured on a 2-core AVX-512 Xeon, thread CPU time, against OpenBLAS 0.3.34 SkylakeX:
M=17, K=768, N=2304 0.32-0.38x; M=8, K=768, N=3072 0.3x; M=128, K=768, N=3072 0.7x;
M=1024, K=768, N=768 1.02x; tiny K loses (M=3136, K=24 1.1-1.3x), so K < MIN_K stays
with BLAS.
"""

from __future__ import annotations

import numpy as np

from mdsl.codegen import kir
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import CONST, Tensor

PANEL = 32  # MDSL_PK_NR of the C kernel
MIN_K = 64


def pack_panels(b: np.ndarray) -> np.ndarray:
    """`b` (K, N) as panels of PANEL columns, flat.

    >>> b = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> pack_panels(b).reshape(-1, 2, PANEL)[0, :, :4]
    array([[0., 1., 2., 0.],
           [3., 4., 5., 0.]], dtype=float32)
    """
    k, n = b.shape
    panels = -(-n // PANEL)
    padded = np.zeros((k, panels * PANEL), b.dtype)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, PANEL).transpose(1, 0, 2)).reshape(-1)


def constant_value(t: Tensor) -> np.ndarray | None:
    """The value of `t` if a Const node makes it, else None."""
    node = t.producer
    return node.const_value() if node is not None and node.op_type == CONST else None


def with_packed_weights(ctx, g: kir.Gemm, b: Tensor) -> kir.Gemm:
    """`g` reading a packed copy of its constant right operand `b`, when the target takes
    derived constants and the packed kernel computes `g` (float32, one matrix, A not
    transposed, alpha 1, static N and K); else `g`."""
    if ctx.derived_constant is None or g.dtype != DType.float32 or g.batch_shape:
        return g
    if g.trans_a or g.alpha != 1.0 or len(b.shape) != 2:
        return g
    if any(isinstance(v, Dim) for v in (g.n, g.k)) or g.k < MIN_K:
        return g
    value = constant_value(b)
    if value is None or value.dtype != np.float32:
        return g
    matrix = value.T if g.trans_b else value
    g.packed_b = ctx.derived_constant(pack_panels(matrix), DType.float32)
    return g
