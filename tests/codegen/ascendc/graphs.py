"""Graphs the AscendC tests build once and share (and the golden files record).

Sizes are deliberately not multiples of any tile (37, 77, 300, ...) so every kernel
runs tails. The golden-file graphs live in golden_graphs.py.
"""

from __future__ import annotations

import numpy as np

import mdsl
from mdsl import ops
from mdsl.ir.dtype import DType


def vector_mix() -> mdsl.Graph:
    """Pointwise kernels: broadcasts (row, per-row scalar), float16 in and out, casts,
    comparisons and selects, math-library functions, a transposed (gathered) operand, an
    int32 operand, a bfloat16 chain, a float16 transpose copy, and a max pool between two pointwise kernels
    (no AscendC template: a host fallback)."""
    with mdsl.Graph("vector_mix") as g:
        a = g.input("a", (5, 77))
        b = g.input("b", (77,))
        c = g.input("c", (5, 1))
        h = g.input("h", (5, 77), "float16")
        t = g.input("t", (77, 5))
        q = g.input("q", (5, 77), "int32")
        img = g.input("img", (1, 2, 6, 6))
        bf = g.input("bf", (5, 77), "bfloat16")
        g.output(ops.relu(a * b + c), "bias_relu")
        g.output(ops.silu(h), "silu_half")
        g.output(ops.leaky_relu(a, alpha=0.1), "leaky")
        g.output(ops.transpose(t, perm=(1, 0)) - a, "transposed")
        g.output(ops.gelu(a, approximate="tanh") + ops.gelu(b, approximate="none"), "gelus")
        g.output(ops.exp(a) / (ops.abs(a) + 1.0) - ops.sqrt(ops.abs(a)), "ratio")
        g.output(ops.clip(a, -0.5, 0.5) * ops.sigmoid(c), "clipped")
        g.output(ops.cast(h, to="float32") * 3.0 + ops.cast(q, to="float32"), "widened")
        g.output(ops.cast(a * 0.25, to="float16"), "narrowed")
        g.output(ops.transpose(h, perm=(1, 0)), "half_copy")
        g.output(ops.tanh(bf) * 2.0, "bfloat")
        pooled = ops.max_pool(img * 2.0, kernel_shape=(2, 2), strides=(2, 2))
        g.output(pooled + 1.0, "pooled")
    return g


def vector_mix_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.standard_normal((5, 77)).astype(np.float32),
        "b": rng.standard_normal(77).astype(np.float32),
        "c": rng.standard_normal((5, 1)).astype(np.float32),
        "h": rng.standard_normal((5, 77)).astype(np.float16),
        "t": rng.standard_normal((77, 5)).astype(np.float32),
        "q": rng.integers(-50, 50, (5, 77)).astype(np.int32),
        "img": rng.standard_normal((1, 2, 6, 6)).astype(np.float32),
        "bf": rng.standard_normal((5, 77)).astype(DType.bfloat16.np),
    }


def rows() -> mdsl.Graph:
    """Row kernels: softmax, log-softmax and layer norm (float32 and float16), sums,
    maxima, minima, a mean over a middle axis and a softmax over the first (strided rows,
    gathered and scattered), and a reduction of everything (no outer index)."""
    with mdsl.Graph("rows") as g:
        x = g.input("x", (6, 300))
        xh = g.input("xh", (6, 300), "float16")
        z = g.input("z", (4, 5, 7))
        gamma = mdsl.param("gamma", (300,))
        beta = mdsl.param("beta", (300,))
        g.output(ops.softmax(x, axis=-1), "softmax")
        g.output(ops.log_softmax(x, axis=-1), "log_softmax")
        g.output(ops.layer_norm(x, gamma, beta, axis=-1, epsilon=1e-5), "layer_norm")
        g.output(ops.softmax(xh, axis=-1), "softmax_half")
        g.output(
            ops.layer_norm(
                xh,
                ops.cast(gamma, to="float16"),
                ops.cast(beta, to="float16"),
                axis=-1,
                epsilon=1e-5,
            ),
            "layer_norm_half",
        )
        g.output(ops.reduce_sum(x * x, axes=(1,), keepdims=False), "sum_squares")
        g.output(
            ops.reduce_max(x, axes=(1,), keepdims=True)
            - ops.reduce_min(x, axes=(1,), keepdims=True),
            "spread",
        )
        g.output(ops.reduce_mean(z, axes=(1,), keepdims=False), "middle_mean")
        g.output(ops.softmax(z, axis=0), "column_softmax")
        g.output(ops.reduce_sum(z, axes=(0, 1, 2), keepdims=False), "total")
    return g


def rows_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((6, 300)).astype(np.float32),
        "xh": rng.standard_normal((6, 300)).astype(np.float16),
        "z": rng.standard_normal((4, 5, 7)).astype(np.float32),
    }


def cube() -> mdsl.Graph:
    """Cube kernels: a matmul with bias and GELU epilogue (M, N not multiples of 16),
    batched matmuls, transposed Gemms (B, and A and B) with alpha, a float16 matmul, a strided grouped
    convolution with bias and ReLU, and a 1x1 convolution (no im2col)."""
    with mdsl.Graph("cube") as g:
        x = g.input("x", (2, 37, 50))
        q = g.input("q", (2, 3, 20, 24))
        k = g.input("k", (2, 3, 24, 18))
        a = g.input("a", (30, 40))
        at = g.input("at", (40, 30))
        xh = g.input("xh", (33, 48), "float16")
        img = g.input("img", (2, 4, 9, 11))
        w = mdsl.param("w", (50, 29))
        bias = mdsl.param("bias", (29,))
        bt = mdsl.param("bt", (20, 40))
        c = mdsl.param("c", (20,))
        wh = mdsl.param("wh", (48, 40), "float16")
        cw = mdsl.param("cw", (6, 2, 3, 3))
        cb = mdsl.param("cb", (6,))
        pw = mdsl.param("pw", (5, 4, 1, 1))
        g.output(ops.gelu(x @ w + bias, approximate="none"), "dense_gelu")
        g.output(q @ k, "batched")
        g.output(ops.gemm(a, bt, c, alpha=0.5, beta=1.0, transA=False, transB=True), "gemm_t")
        g.output(ops.gemm(at, bt, c, alpha=1.0, beta=1.0, transA=True, transB=True), "gemm_tt")
        g.output(xh @ wh, "half")
        conv = ops.conv2d(img, cw, cb, strides=2, pads=1, group=2)
        g.output(ops.relu(conv), "conv")
        g.output(ops.conv2d(img, pw) * 2.0, "pointwise_conv")
    return g


def cube_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    return {
        "x": normal(2, 37, 50),
        "q": normal(2, 3, 20, 24),
        "k": normal(2, 3, 24, 18),
        "a": normal(30, 40),
        "at": normal(40, 30),
        "xh": normal(33, 48, dtype=np.float16) * np.float16(0.25),
        "img": normal(2, 4, 9, 11),
    }


def epilogues() -> mdsl.Graph:
    """Matmul epilogues on the result in the UB: float32 with a bias (read once per block)
    and a residual (read per row), M = 70 and N = 270 (tails in both: two column blocks
    of at most 256, and on a small UB several row blocks per core), and a float16 matmul
    with a scale and a float16 bias."""
    with mdsl.Graph("epilogues") as g:
        x = g.input("x", (70, 24))
        r = g.input("r", (70, 270))
        xh = g.input("xh", (33, 32), "float16")
        w = mdsl.param("w", (24, 270))
        b = mdsl.param("b", (270,))
        wh = mdsl.param("wh", (32, 40), "float16")
        bh = mdsl.param("bh", (40,), "float16")
        g.output(ops.tanh(x @ w + b + r), "dense_residual")
        g.output((xh @ wh) * 0.5 + bh, "half_bias")
    return g


def epilogues_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": (rng.standard_normal((70, 24)) * 0.5).astype(np.float32),
        "r": rng.standard_normal((70, 270)).astype(np.float32),
        "xh": (rng.standard_normal((33, 32)) * 0.25).astype(np.float16),
    }


def soc_310p() -> mdsl.Graph:
    """What the 310P takes (no DataCopyPad, no float32 or bfloat16 on the cube): rows of
    whole 32-byte blocks, a float16 pointwise chain, a float32 softmax and layer norm, and a
    float16 matmul with M, N not multiples of 16."""
    with mdsl.Graph("soc_310p") as g:
        h = g.input("h", (4, 64), "float16")
        x = g.input("x", (6, 128))
        a = g.input("a", (33, 64), "float16")
        w = mdsl.param("w", (64, 40), "float16")
        gamma = mdsl.param("gamma", (128,))
        beta = mdsl.param("beta", (128,))
        g.output(ops.silu(h) * 2.0, "silu_half")
        g.output(ops.softmax(x, axis=-1), "softmax")
        g.output(ops.layer_norm(x, gamma, beta, axis=-1, epsilon=1e-5), "layer_norm")
        g.output(a @ w, "half")
    return g


def soc_310p_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "h": rng.standard_normal((4, 64)).astype(np.float16),
        "x": rng.standard_normal((6, 128)).astype(np.float32),
        "a": (rng.standard_normal((33, 64)) * 0.25).astype(np.float16),
    }
