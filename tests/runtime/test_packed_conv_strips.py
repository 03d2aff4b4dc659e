"""How the hand-written packed convolution stores a strip of 32 output-grid positions
(`mdsl.targets.c.conv`): in one loop when the grid has no padding columns and every
epilogue operand walks the output plane contiguously, else one output row segment at a
time. Both against PyTorch or the interpreter, at 1 and 2 threads, with oneDNN off."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import onednn

RNG = np.random.default_rng(2031)
WHOLE = "the grid is the output plane"  # the one-loop store's comment
SEGMENTS = "p = (oy + 1) *"  # the per-segment store skipping padding columns


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _hand_built(g: mdsl.Graph, threads: int):
    with onednn.disabled():  # a static build's plan is made by its first call
        exe = mdsl.compile(g, "c", threads=threads)
        source = "\n".join(exe.sources.values())
        return exe, source


CASES = [
    # (cin, cout, size, kernel, stride, pad, with bias + ReLU, stored whole)
    (24, 40, 7, 1, 1, 0, True, True),  # 49 positions: a full strip and a part of one
    (24, 40, 7, 1, 1, 0, False, True),  # no epilogue: copied out in one piece
    (16, 20, 11, 3, 2, 1, True, True),  # an im2col grid is the output plane
    (16, 20, 9, 3, 1, 1, True, False),  # a padded grid has columns between rows
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "ci{}-co{}-s{}-k{}-st{}-p{}-e{}".format(*c))
def test_strips_store_the_convolution_torch_computes(case, threads):
    cin, cout, size, k, stride, pad, epilogue, whole = case
    x, w, b = _rand(2, cin, size, size), _rand(cout, cin, k, k), _rand(cout)
    with mdsl.Graph("strips") as g:
        xi = g.input("x", x.shape)
        bias = g.const("b", b) if epilogue else None
        y = ops.conv2d(xi, g.const("w", w), bias, strides=stride, pads=pad)
        g.output(ops.relu(y) if epilogue else y, "y")
    exe, source = _hand_built(g, threads)
    assert "mdsl_pc_panel(" in source
    assert (WHOLE in source, SEGMENTS in source) == (whole, not whole)
    expect = F.conv2d(
        torch.from_numpy(x),
        torch.from_numpy(w),
        torch.from_numpy(b) if epilogue else None,
        stride,
        pad,
    )
    expect = (F.relu(expect) if epilogue else expect).numpy()
    np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_an_operand_broadcast_along_one_axis_keeps_the_row_segments(threads):
    """An epilogue operand of shape [1, 1, 1, W] does not walk the plane contiguously
    (its row stride is 0, not W): `oy = 0, ox = p` would index it past its end."""
    x, w = _rand(1, 24, 7, 7), _rand(32, 24, 1, 1)
    ramp = np.linspace(-1, 1, 7, dtype=np.float32).reshape(1, 1, 1, 7)
    with mdsl.Graph("row_broadcast") as g:
        y = ops.conv2d(g.input("x", x.shape), g.const("w", w))
        g.output(ops.relu(y + g.const("ramp", ramp)), "y")
    exe, source = _hand_built(g, threads)
    assert SEGMENTS in source and WHOLE not in source
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_a_residual_of_the_plane_is_added_in_the_one_loop(threads):
    x, w = _rand(1, 32, 7, 7), _rand(32, 32, 1, 1)
    with mdsl.Graph("residual_1x1") as g:
        xi = g.input("x", x.shape)
        g.output(ops.relu(ops.conv2d(xi, g.const("w", w)) + xi), "y")
    exe, source = _hand_built(g, threads)
    assert WHOLE in source
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
    )
