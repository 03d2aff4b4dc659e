"""conv3d_as_conv2d: 3-D convolutions run as one 2-D convolution over depth slices plus a
sum over depth taps, compiled to C without a callback, equal to PyTorch's conv3d."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops

RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    ("attrs", "torch_args", "groups", "bias"),
    [
        ({"pads": (1,) * 6}, {"padding": 1}, 1, True),
        ({"strides": (2, 1, 2)}, {"stride": (2, 1, 2)}, 1, False),
        (
            {"dilations": (2, 1, 1), "pads": (2, 0, 1, 2, 0, 1)},
            {"dilation": (2, 1, 1), "padding": (2, 0, 1)},
            1,
            True,
        ),
        ({"group": 2, "pads": (0, 1, 1, 0, 1, 1)}, {"groups": 2, "padding": (0, 1, 1)}, 2, True),
    ],
)
def test_3d_convolution_runs_as_2d_and_equals_torch(attrs, torch_args, groups, bias):
    x = RNG.standard_normal((2, 4, 5, 6, 7)).astype(np.float32)
    w = RNG.standard_normal((6, 4 // groups, 3, 2, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    with mdsl.Graph("video") as g:
        inputs = [g.input("x", x.shape), g.const("w", w)] + ([g.const("b", b)] if bias else [])
        g.output(ops.conv(*inputs, **attrs), "y")
    assert "Conv" in {n.op_type for n in mdsl.optimize(g)}
    assert "rewrote 1 3-D Conv(s) as 2-D" in str(mdsl.optimize(g).pass_log)
    exe = mdsl.compile(g, backend="c")
    assert not exe.plan.fallbacks
    want = F.conv3d(
        torch.from_numpy(x),
        torch.from_numpy(w),
        torch.from_numpy(b) if bias else None,
        **torch_args,
    ).numpy()
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], want, rtol=1e-4, atol=1e-4)
