"""conv_transpose_as_matmul: a transposed convolution whose kernel tiles its output (the
upsampling of U-Nets) becomes a MatMul and compiles to C without a callback, equal to
PyTorch; other transposed convolutions are left alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops

RNG = np.random.default_rng(5)
TORCH = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize(
    ("spatial", "kernel", "bias"),
    [
        ((7,), (3,), True),
        ((5, 6), (2, 2), True),
        ((3, 4), (2, 3), False),
        ((3, 2, 4), (2, 2, 2), True),
    ],
)
def test_tiling_kernels_become_a_matmul_and_equal_torch(spatial, kernel, bias):
    x = RNG.standard_normal((2, 6, *spatial)).astype(np.float32)
    w = RNG.standard_normal((6, 4, *kernel)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    with mdsl.Graph("up") as g:
        xt = g.input("x", x.shape)
        args = [xt, g.const("w", w)] + ([g.const("b", b)] if bias else [])
        g.output(ops.conv_transpose(*args, strides=kernel), "y")
    optimized = mdsl.optimize(g)
    assert "ConvTranspose" not in {n.op_type for n in optimized}
    assert "rewrote 1 ConvTranspose(s) as MatMul" in str(optimized.pass_log)
    exe = mdsl.compile(g, backend="c")
    assert not exe.plan.fallbacks
    dims = len(spatial)
    want = TORCH[dims](
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b) if bias else None, kernel
    ).numpy()
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": (2, 2), "pads": (1, 1, 1, 1)},  # DCGAN's k=4, s=2, p=1 (here k=2)
        {"strides": (1, 1)},  # overlapping taps
        {"strides": (2, 2), "output_padding": (1, 1)},
        {"strides": (2, 2), "group": 2},
    ],
)
def test_other_transposed_convolutions_are_left_alone(attrs):
    with mdsl.Graph("up") as g:
        x = g.input("x", (1, 4, 3, 3))
        g.output(ops.conv_transpose(x, mdsl.param("w", (4, 2, 2, 2)), **attrs), "y")
    assert "ConvTranspose" in {n.op_type for n in mdsl.optimize(g)}
