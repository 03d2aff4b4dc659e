"""The graphs whose generated C is kept under tests/golden/ (see tests/codegen/test_golden.py).

Their nodes record `tests/golden/graphs.py:<line>` as their source, and the kernel comments
of the golden files show it: moving a line here changes the golden files. Regenerate them
with `MDSL_UPDATE_GOLDEN=1 python -m pytest tests/codegen/test_golden.py` and review the diff.
"""

from __future__ import annotations

import numpy as np

import mdsl
from mdsl import ops


def _values(*shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def pointwise_chain() -> mdsl.Graph:
    """gelu(x * a + b) * sigmoid(x) + x: one fused loop."""
    with mdsl.Graph("golden_pointwise_chain") as g:
        x = g.input("x", (4, 256))
        a = g.const("a", _values(256, seed=1))
        b = g.const("b", _values(256, seed=2))
        y = ops.gelu(x * a + b) * ops.sigmoid(x) + x
        g.output(y, "y")
    return g


def softmax() -> mdsl.Graph:
    """Softmax over the last axis: one row kernel (max, sum of exp, normalize)."""
    with mdsl.Graph("golden_softmax") as g:
        x = g.input("x", (8, 128))
        g.output(ops.softmax(x, axis=-1), "y")
    return g


def layer_norm() -> mdsl.Graph:
    """Layer norm over rows of 300: sums in blocks of partial sums with a tail, and the
    next row hinted into the cache (rows of 1200 bytes, read three times)."""
    with mdsl.Graph("golden_layer_norm") as g:
        x = g.input("x", (8, 300))
        gamma = g.const("gamma", _values(300, seed=5))
        beta = g.const("beta", _values(300, seed=6))
        g.output(ops.layer_norm(x, gamma, beta, axis=-1), "y")
    return g


def matmul_bias_gelu() -> mdsl.Graph:
    """x @ W + bias, then exact GELU: a BLAS GEMM with the bias and GELU as its epilogue."""
    with mdsl.Graph("golden_matmul_bias_gelu") as g:
        x = g.input("x", (16, 64))
        w = g.const("w", _values(64, 32, seed=3))
        bias = g.const("bias", _values(32, seed=4))
        y = ops.gelu(x @ w + bias, approximate="none")
        g.output(y, "y")
    return g


def conv_relu() -> mdsl.Graph:
    """A lone 1x1 convolution, then ReLU: mdsl's convolution on weights packed at plan time
    (oneDNN takes only convolutions chained to others), ReLU stored with each row."""
    with mdsl.Graph("golden_conv_relu") as g:
        x = g.input("x", (1, 16, 7, 7))
        w = g.const("w", _values(24, 16, 1, 1, seed=7))
        bias = g.const("bias", _values(24, seed=8))
        g.output(ops.relu(ops.conv2d(x, w, bias)), "y")
    return g


def grouped_conv_relu() -> mdsl.Graph:
    """A grouped 3x3 convolution (4 groups of 4 channels), then ReLU: the packed kernel
    group after group, each group's panels on its channels of the padded copy."""
    with mdsl.Graph("golden_grouped_conv_relu") as g:
        x = g.input("x", (1, 16, 6, 6))
        w = g.const("w", _values(16, 4, 3, 3, seed=9))
        g.output(ops.relu(ops.conv2d(x, w, pads=(1, 1, 1, 1), group=4)), "y")
    return g


GRAPHS = {
    "pointwise_chain": pointwise_chain,
    "softmax": softmax,
    "layer_norm": layer_norm,
    "matmul_bias_gelu": matmul_bias_gelu,
    "conv_relu": conv_relu,
    "grouped_conv_relu": grouped_conv_relu,
}
