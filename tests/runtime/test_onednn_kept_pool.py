"""Max pooling between oneDNN convolutions, in their NHWC or nChw16c layout, by the C
target's own loops (`mdsl.targets.c.conv.blocked_max_pool_body`): against PyTorch at 1
and 2 threads, batch 2, with padding, ceil mode, dilation, channel counts off the vector
and block sizes, and NaN."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import onednn
from tests.runtime.machine import needs_avx512
from tests.runtime.test_onednn_conv import _rand, _source

pytestmark = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)

T = torch.from_numpy

POOLS = [
    # (channels, kernel, stride, pad, dilation, ceil mode)
    (13, 3, 2, 1, 1, False),  # fewer channels than a vector
    (24, 3, 2, 0, 1, True),  # the last window hangs over the end
    (64, 3, 1, 1, 2, False),  # dilated, padded
    (40, 2, 2, 0, 1, False),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", POOLS, ids=lambda p: "c{}-k{}-s{}-p{}-d{}-ceil{}".format(*p))
def test_a_max_pool_between_convolutions_in_nhwc_equals_torch(case, threads):
    c, k, s, p, d, ceil = case
    x, w1, w2 = _rand(2, 8, 15, 13), _rand(c, 8, 3, 3) * 0.3, _rand(16, c, 3, 3) * 0.3
    with mdsl.Graph("kept_pool") as g:
        h = ops.conv2d(g.input("x", x.shape), g.const("w1", w1), pads=1)
        h = ops.max_pool(h, k, strides=s, pads=p, dilations=d, ceil_mode=ceil)
        g.output(ops.conv2d(h, g.const("w2", w2), pads=1), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert "max pooling by hand: NHWC -> NHWC" in _source(exe)
    h = F.max_pool2d(F.conv2d(T(x), T(w1), padding=1), k, s, p, d, ceil_mode=ceil)
    expect = F.conv2d(h, T(w2), padding=1).numpy()
    for _ in range(3):  # both team sizes
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
def test_a_max_pool_of_the_nchw16c_stem_keeps_nan_and_equals_torch(threads):
    """ResNet's stem (7x7 stride 2 on 3 channels, oneDNN's `jit` kernel in nChw16c, 24
    channels: the second block half padding) and its 3x3 stride-2 max pool; a NaN in the
    input reaches the pool and wins there, as in PyTorch."""
    x, w1, w2 = _rand(2, 3, 29, 31), _rand(24, 3, 7, 7) * 0.2, _rand(16, 24, 3, 3) * 0.2
    x[1, 2, 20, 9] = np.nan
    with mdsl.Graph("kept_stem_pool") as g:
        h = ops.conv2d(g.input("x", x.shape), g.const("w1", w1), strides=2, pads=3)
        h = ops.max_pool(h, 3, strides=2, pads=1)
        g.output(ops.conv2d(h, g.const("w2", w2), pads=1), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert "max pooling by hand: nChw16c -> nChw16c" in _source(exe)
    h = F.max_pool2d(F.conv2d(T(x), T(w1), stride=2, padding=3), 3, 2, 1)
    expect = F.conv2d(h, T(w2), padding=1).numpy()
    assert 0 < np.isnan(expect).sum() < expect.size // 4
    for _ in range(3):
        got = exe(x=x)["y"]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expect))
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
