"""conv_transpose_as_conv: a transposed convolution whose kernel tiles its output (the
upsampling of U-Nets) becomes a MatMul, any other a Conv of the input with zeros between
its elements; both compile to C without a callback, equal to PyTorch."""

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
    assert "rewrote 1 ConvTranspose(s) as MatMul or Conv" in str(optimized.pass_log)
    exe = mdsl.compile(g, backend="c")
    assert not exe.plan.fallbacks
    dims = len(spatial)
    want = TORCH[dims](
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b) if bias else None, kernel
    ).numpy()
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("spatial", "kernel", "attrs", "torch_args"),
    [
        ((6, 5), (4, 4), {"strides": (2, 2), "pads": (1,) * 4}, {"stride": 2, "padding": 1}),
        ((4, 4), (3, 3), {"strides": (1, 1)}, {}),
        (
            (4, 5),
            (3, 3),
            {"strides": (2, 2), "output_padding": (1, 1)},
            {"stride": 2, "output_padding": 1},
        ),
        ((4, 4), (3, 2), {"strides": (3, 2), "dilations": (2, 1), "pads": (3, 0, 2, 1)}, None),
        (
            (5,),
            (5,),
            {"strides": (3,), "pads": (2, 2), "group": 2},
            {"stride": 3, "padding": 2, "groups": 2},
        ),
        (
            (3, 3, 2),
            (3, 3, 3),
            {"strides": (2, 1, 2), "pads": (1,) * 6},
            {"stride": (2, 1, 2), "padding": 1},
        ),
    ],
)
def test_other_transposed_convolutions_become_a_conv_of_the_spread_input(
    spatial, kernel, attrs, torch_args
):
    group = attrs.get("group", 1)
    x = RNG.standard_normal((2, 4, *spatial)).astype(np.float32)
    w = RNG.standard_normal((4, 6 // group, *kernel)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    with mdsl.Graph("up") as g:
        g.output(
            ops.conv_transpose(g.input("x", x.shape), g.const("w", w), g.const("b", b), **attrs),
            "y",
        )
    assert "ConvTranspose" not in {n.op_type for n in mdsl.optimize(g)}
    exe = mdsl.compile(g, backend="c")
    assert not exe.plan.fallbacks
    want = mdsl.interpret(g, {"x": x})["y"]  # the ConvTranspose's own numpy binding
    if torch_args is not None:
        ref = TORCH[len(spatial)](
            torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **torch_args
        )
        np.testing.assert_allclose(want, ref.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-4, atol=1e-4)
