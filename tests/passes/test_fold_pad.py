"""fold_pad_into_conv: which Pads fold into the Conv after them, and the results."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.passes.checks import assert_preserves_results, count

RNG = np.random.default_rng(7)


def pad_conv_graph(
    pads, *, axes=None, mode="constant", value=0.0, bias=True, conv_pads=0, auto_pad="NOTSET"
):
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3, 8, 9))
        w = g.const("w", RNG.standard_normal((5, 3, 3, 3)).astype(np.float32))
        b = g.const("b", RNG.standard_normal(5).astype(np.float32)) if bias else None
        p = ops.pad(x, pads, value, axes, mode=mode)
        conv_pads = None if auto_pad != "NOTSET" else conv_pads
        g.output(ops.conv2d(p, w, b, strides=2, pads=conv_pads, auto_pad=auto_pad), "y")
    return g


@pytest.mark.parametrize(
    ("pads", "axes", "bias", "conv_pads"),
    [
        ((0, 0, 0, 0, 0, 0, 1, 1), None, True, 0),  # TF "same", stride 2: after only
        ((0, 0, 1, 2, 0, 0, 2, 0), None, False, 0),
        ((1, 0, 0, 1), (2, 3), True, (1, 2, 0, 1)),  # onto the conv's own padding
    ],
)
def test_a_zero_pad_of_the_spatial_dims_folds_into_the_conv(pads, axes, bias, conv_pads):
    g = pad_conv_graph(pads, axes=axes, bias=bias, conv_pads=conv_pads)
    g2 = mdsl.passes.run(g, ["fold_pad_into_conv", "dce"])
    assert count(g2, "Pad") == 0 and count(g2, "Conv") == 1
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("auto_pad", "folds"),
    [("VALID", True), ("SAME_UPPER", False)],  # VALID: Hugging Face's EfficientNet
)
def test_a_zero_pad_folds_into_a_valid_conv_and_not_into_a_same_one(auto_pad, folds):
    g = pad_conv_graph((0, 0, 1, 0, 0, 0, 2, 1), auto_pad=auto_pad)
    g2 = mdsl.passes.run(g, ["fold_pad_into_conv", "dce"])
    assert count(g2, "Pad") == (0 if folds else 1)
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("pads", "mode", "value"),
    [
        ((0, 0, 0, 0, 0, 0, 1, 1), "reflect", 0.0),
        ((0, 0, 0, 0, 0, 0, 1, 1), "constant", 1.0),
        ((1, 0, 0, 0, 0, 0, 0, 0), "constant", 0.0),  # pads the batch
        ((0, 0, 0, -1, 0, 0, 1, 1), "constant", 0.0),  # crops
    ],
)
def test_pads_the_conv_cannot_express_stay(pads, mode, value):
    g = pad_conv_graph(pads, mode=mode, value=value)
    g2 = mdsl.passes.run(g, ["fold_pad_into_conv", "dce"])
    assert count(g2, "Pad") == 1
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)


def test_the_default_pipeline_folds_a_pad_then_a_batchnorm_around_one_conv():
    with mdsl.Graph("g") as g:
        x = g.input("x", (1, 3, 8, 9))
        w = g.const("w", RNG.standard_normal((5, 3, 3, 3)).astype(np.float32))
        y = ops.conv2d(ops.pad(x, (0, 0, 1, 1, 0, 0, 1, 1)), w)
        ones = np.ones(5, np.float32)
        p = [g.const(n, v) for n, v in (("s", ones * 2), ("b", ones), ("m", ones), ("v", ones))]
        g.output(ops.batch_norm(y, *p), "y")
    g2 = mdsl.optimize(g)
    assert count(g2, "Pad") == 0 and count(g2, "BatchNormalization") == 0
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)
