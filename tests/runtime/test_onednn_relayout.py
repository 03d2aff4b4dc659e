"""The moves between NCHW and oneDNN's NHWC and nChw16c that the C target does by hand
(`csrc/templates/c/relayout.h.j2`) instead of with oneDNN's reorder primitive: blocks
whose NCHW input and output are moved so, against PyTorch, at 1 and 2 threads, with
channel counts and pixel counts off the 16x16 tiles, and batch 2. oneDNN's verbose log
shows no reorder primitive is made, so the hand path is the one these results come from."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import onednn
from tests.runtime.machine import needs_avx512
from tests.runtime.test_onednn_conv import _primitives_made, _rand, _source

pytestmark = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)

T = torch.from_numpy


def _block(batch, c, h, w):
    """A ResNet basic block: its NCHW input moved into NHWC (read by both convolutions),
    its result moved back to NCHW."""
    w1, b1, w2, b2 = _rand(c, c, 3, 3) * 0.2, _rand(c), _rand(c, c, 3, 3) * 0.2, _rand(c)
    with mdsl.Graph("relayout_block") as g:
        x = g.input("x", (batch, c, h, w))
        y = ops.relu(ops.conv2d(x, g.const("w1", w1), g.const("b1", b1), pads=1))
        y = ops.conv2d(y, g.const("w2", w2), g.const("b2", b2), pads=1)
        g.output(ops.relu(y + x), "y")

    def expect(x):
        y = F.relu(F.conv2d(T(x), T(w1), T(b1), padding=1))
        return F.relu(F.conv2d(y, T(w2), T(b2), padding=1) + T(x)).numpy()

    return g, expect


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "batch, c, h, w",
    [
        (1, 16, 8, 8),  # whole tiles only
        (2, 64, 17, 17),  # 289 pixels: two tasks of 256 and a tile of one pixel
        (2, 24, 7, 9),  # a group of 8 channels; 63 pixels: a tile of 15
        (1, 13, 5, 11),  # fewer channels than a tile
        (2, 40, 16, 20),  # 2.5 groups of 16
    ],
)
def test_a_block_moved_between_nchw_and_nhwc_by_hand_equals_torch(batch, c, h, w, threads, capfd):
    g, expect = _block(batch, c, h, w)
    exe = mdsl.compile(g, "c", threads=threads)
    src = _source(exe)
    assert "x NCHW (kept in NHWC for other kernels) -> NHWC" in src
    assert re.search(r"residual NHWC \(the destination\) -> NCHW", src)
    xs = [_rand(batch, c, h, w) for _ in range(4)]  # both team sizes' calls
    got = []
    made = _primitives_made(capfd, lambda: got.extend(exe(x=x)["y"].copy() for x in xs))
    # a Winograd convolution (64 channels) makes no primitive of oneDNN's
    winograd = "computed as Winograd" in src
    assert "convolution" not in made if winograd else made.get("convolution", 0) >= 2
    assert "reorder" not in made
    assert winograd == (c == 64)
    for x, y in zip(xs, got):
        np.testing.assert_allclose(y, expect(x), rtol=1e-4, atol=1e-4)


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cout", [16, 24])  # 24: nChw16c pads the second block to 32
def test_a_stem_in_nchw16c_with_an_nchw_residual_and_result_equals_torch(cout, threads, capfd):
    """ResNet's 7x7 stride-2 stem on 3 channels runs oneDNN's `jit` kernel in nChw16c: the
    NCHW residual is moved into it (its padding channels zero) and the result out of it."""
    x, r = _rand(2, 3, 23, 21), _rand(2, cout, 12, 11)
    w, b = _rand(cout, 3, 7, 7) * 0.2, _rand(cout)
    with mdsl.Graph("relayout_stem") as g:
        y = ops.conv2d(g.input("x", x.shape), g.const("w", w), g.const("b", b), strides=2, pads=3)
        g.output(ops.relu(y + g.input("r", r.shape)), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert re.search(r"oneDNN jit:\S+: x NCHW, residual NCHW -> NCHW", _source(exe))
    got = []
    made = _primitives_made(capfd, lambda: got.extend(exe(x=x, r=r)["y"].copy() for _ in range(3)))
    assert "reorder" not in made
    expect = F.relu(F.conv2d(T(x), T(w), T(b), stride=2, padding=3) + T(r)).numpy()
    for y in got:
        np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c, c2", [(16, 16), (24, 8), (40, 32)])  # 24, 40: a part block
def test_a_kept_nchw16c_pool_read_by_an_nhwc_1x1_equals_torch(c, c2, threads, capfd):
    """SqueezeNet's and ResNet's stem and max pool, kept nChw16c, read by an NHWC 1x1
    convolution: the pool's result moved into NHWC by hand, 16 channels a pixel at a time
    (and the channels of a part block on their own)."""
    x, w, b = _rand(2, 3, 33, 31), _rand(c, 3, 3, 3) * 0.3, _rand(c)
    w2, b2, w3 = _rand(c2, c, 1, 1) * 0.3, _rand(c2), _rand(c2, c2, 3, 3) * 0.3
    with mdsl.Graph("relayout_pool_1x1") as g:
        y = ops.relu(ops.conv2d(g.input("x", x.shape), g.const("w", w), g.const("b", b), strides=2))
        y = ops.max_pool(y, kernel_shape=(3, 3), strides=(2, 2))
        y = ops.relu(ops.conv2d(y, g.const("w2", w2), g.const("b2", b2)))
        g.output(ops.conv2d(y, g.const("w3", w3), pads=1), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert re.search(r"oneDNN brgconv_1x1:\S+: x nChw16c -> NHWC", _source(exe))
    got = []
    made = _primitives_made(capfd, lambda: got.extend(exe(x=x)["y"].copy() for _ in range(4)))
    assert "reorder" not in made
    y = F.max_pool2d(F.relu(F.conv2d(T(x), T(w), T(b), stride=2)), 3, 2)
    expect = F.conv2d(F.relu(F.conv2d(y, T(w2), T(b2))), T(w3), padding=1).numpy()
    for y in got:
        np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c", [16, 24])  # 24: the nChw16c destination's padding lanes
def test_an_nhwc_residual_moved_into_an_nchw16c_destination_equals_torch(c, threads, capfd):
    """A kept NHWC residual added by a stem whose primitive computes in nChw16c: the
    residual moved into the destination by hand, its padding channels zero."""
    x1, x2 = _rand(2, 32, 17, 15), _rand(2, 3, 17, 15)
    w1, wa, ba = _rand(32, 32, 3, 3) * 0.1, _rand(c, 32, 1, 1) * 0.2, _rand(c)
    w, b = _rand(c, 3, 7, 7) * 0.2, _rand(c)
    with mdsl.Graph("relayout_residual") as g:
        y1 = ops.relu(ops.conv2d(g.input("x1", x1.shape), g.const("w1", w1), pads=1))
        y1 = ops.relu(ops.conv2d(y1, g.const("wa", wa), g.const("ba", ba)))
        y = ops.conv2d(g.input("x2", x2.shape), g.const("w", w), g.const("b", b), pads=3)
        g.output(ops.relu(y + y1), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert re.search(r"oneDNN jit:\S+: x NCHW, residual NHWC -> NCHW", _source(exe))
    got = []
    run = lambda: got.extend(exe(x1=x1, x2=x2)["y"].copy() for _ in range(4))  # noqa: E731
    assert "reorder" not in _primitives_made(capfd, run)
    y1 = F.relu(F.conv2d(F.relu(F.conv2d(T(x1), T(w1), padding=1)), T(wa), T(ba)))
    expect = F.relu(F.conv2d(T(x2), T(w), T(b), padding=3) + y1).numpy()
    for y in got:
        np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)
