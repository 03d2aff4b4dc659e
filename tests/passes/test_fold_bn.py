"""fold_conv_bn and fuse_matmul_add: structure and results."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.passes.fold_bn import folded_conv_params
from tests.passes.checks import assert_preserves_results, count, op_types

RNG = np.random.default_rng(7)


def bn_params(g, c, prefix="bn"):
    return [
        g.const(f"{prefix}_scale", RNG.uniform(0.5, 2, c).astype(np.float32)),
        g.const(f"{prefix}_bias", RNG.uniform(-1, 1, c).astype(np.float32)),
        g.const(f"{prefix}_mean", RNG.uniform(-1, 1, c).astype(np.float32)),
        g.const(f"{prefix}_var", RNG.uniform(0.2, 2, c).astype(np.float32)),
    ]


def conv_bn_graph(*, bias=True, group=1, reuse_conv=False, bn_from_input=False):
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 4, 6, 6))
        w = g.const("w", RNG.standard_normal((6, 4 // group, 3, 3)).astype(np.float32))
        b = g.const("b", RNG.standard_normal(6).astype(np.float32)) if bias else None
        y = ops.conv2d(x, w, b, pads=1, strides=2, group=group)
        params = bn_params(g, 6)
        if bn_from_input:
            params[3] = g.input("var", (6,))
        z = ops.relu(ops.batch_norm(y, *params, epsilon=1e-3))
        g.output(z, "z")
        if reuse_conv:
            g.output(y, "conv")
    return g


@pytest.mark.parametrize(("bias", "group"), [(True, 1), (False, 1), (True, 2)])
def test_conv_bn_folds_into_one_conv(bias, group):
    g = conv_bn_graph(bias=bias, group=group)
    g2 = mdsl.passes.run(g, ["fold_conv_bn", "dce"])
    assert op_types(g2) == ["Input", "Const", "Const", "Conv", "Relu", "Output"]
    conv = g2.node("Conv_1")
    assert conv.attrs == g.node("Conv").attrs
    assert [t.producer.name for t in conv.inputs[1:]] == ["weight_bn_folded", "bias_bn_folded"]
    assert (
        g2.pass_log[0].summary
        == "folded 1 BatchNormalization / per-channel Mul / Add node(s) into Conv"
    )
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)


def test_folded_params_match_an_independent_formula():
    w = RNG.standard_normal((2, 1, 1, 1))
    scale, bias, mean, var = (
        np.array([2.0, 3.0]),
        np.array([1.0, -1.0]),
        np.array([0.5, 0.0]),
        np.array([3.0, 8.0]),
    )
    new_w, new_b = folded_conv_params(w, None, scale, bias, mean, var, epsilon=1.0)
    # var + eps = 4, 9 -> s = 2/2, 3/3 = 1, 1
    np.testing.assert_allclose(new_w, w)
    np.testing.assert_allclose(new_b, [-0.5 + 1.0, -1.0])


@pytest.mark.parametrize("kind", ["conv read elsewhere", "non-constant BN param"])
def test_conv_bn_is_left_alone_when_folding_would_be_wrong(kind):
    g = conv_bn_graph(
        reuse_conv=kind == "conv read elsewhere", bn_from_input=kind == "non-constant BN param"
    )
    g2 = mdsl.passes.run(g, ["fold_conv_bn"])
    assert count(g2, "BatchNormalization") == 1 and not g2.pass_log[0].changed


def test_resnet_style_blocks_fold_at_level_2():
    g = conv_bn_graph()
    g2 = mdsl.optimize(g, level=2)
    assert count(g2, "BatchNormalization") == 0 and count(g2, "Conv") == 1
    assert count(mdsl.optimize(g, level=1), "BatchNormalization") == 1
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)


def caffe2_bn_graph(k_shape, *, bias=True, op="both", reuse_conv=False, channels=5):
    """Conv -> BatchNorm -> Mul(k) -> Add(k'), as Caffe2 exports a BN (Inception v2,
    DenseNet), with k of shape `k_shape` (`op` "mul", "add" or "both")."""
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3, 7, 7))
        w = g.const("w", RNG.standard_normal((channels, 3, 3, 3)).astype(np.float32))
        b = g.const("b", RNG.standard_normal(channels).astype(np.float32)) if bias else None
        y = ops.conv2d(x, w, b, pads=1)
        z = ops.batch_norm(y, *bn_params(g, channels), epsilon=1e-5)
        if op in ("mul", "both"):
            z = z * g.const("k_mul", RNG.uniform(0.5, 2, k_shape).astype(np.float32))
        if op in ("add", "both"):
            z = z + g.const("k_add", RNG.uniform(-1, 1, k_shape).astype(np.float32))
        g.output(ops.relu(z), "z")
        if reuse_conv:
            g.output(y, "conv")
    return g


@pytest.mark.parametrize("op", ["mul", "add", "both"])
@pytest.mark.parametrize("k_shape", [(5, 1, 1), (1, 5, 1, 1), (1,), ()])
@pytest.mark.parametrize("bias", [True, False])
def test_per_channel_mul_and_add_after_a_conv_fold_into_it(op, k_shape, bias):
    g = caffe2_bn_graph(k_shape, bias=bias, op=op)
    g2 = mdsl.passes.run(g, ["fold_conv_bn", "dce"])
    assert op_types(g2) == ["Input", "Const", "Const", "Conv", "Relu", "Output"]
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("k_shape", "reuse"),
    [
        ((5, 7, 1), False),  # varies along H: not one value per channel
        ((1, 1, 7), False),  # varies along W
        ((1, 1, 5, 1, 1), False),  # adds a dim
        ((5, 1, 1), True),  # the conv's result is also read elsewhere
    ],
)
def test_mul_add_that_are_not_per_channel_stay(k_shape, reuse):
    g = caffe2_bn_graph(k_shape, op="both", reuse_conv=reuse)
    g2 = mdsl.passes.run(g, ["fold_conv_bn", "dce"])
    assert count(g2, "Mul") == 1 and count(g2, "Add") == 1
    assert_preserves_results(g, g2, rtol=1e-5, atol=1e-5)


def linear_graph(x_shape, bias_shape, *, bias_first=False, reuse_matmul=False):
    with mdsl.Graph("g") as g:
        x = g.input("x", x_shape)
        w = g.const("w", RNG.standard_normal((x_shape[-1], 5)).astype(np.float32))
        c = g.const("c", RNG.standard_normal(bias_shape).astype(np.float32))
        mm = x @ w
        g.output(c + mm if bias_first else mm + c, "y")
        if reuse_matmul:
            g.output(mm, "mm")
    return g


@pytest.mark.parametrize(
    ("x_shape", "bias_shape", "bias_first"),
    [
        (("N", 3), (5,), False),
        (("N", 3), (5,), True),
        ((4, 3), (4, 5), False),
        ((4, 3), (1, 5), False),
    ],
)
def test_2d_matmul_plus_bias_becomes_gemm(x_shape, bias_shape, bias_first):
    g = linear_graph(x_shape, bias_shape, bias_first=bias_first)
    g2 = mdsl.passes.run(g, ["fuse_matmul_add", "dce"])
    assert op_types(g2) == ["Input", "Const", "Const", "Gemm", "Output"]
    gemm = g2.node("Gemm")
    assert [t.name for t in gemm.inputs] == ["x", "w", "c"]
    assert gemm.attrs == {"alpha": 1.0, "beta": 1.0, "transA": False, "transB": False}
    assert g2.pass_log[0].summary == "rewrote 1 match(es)"
    assert_preserves_results(g, g2)


@pytest.mark.parametrize(
    ("x_shape", "bias_shape", "reuse"),
    [
        (("N", 4, 3), (5,), False),  # batched: fusion grouping handles the bias epilogue
        ((4, 3), (2, 4, 5), False),  # the bias widens the output: not a Gemm
        ((4, 3), (5,), True),  # the MatMul result is also read elsewhere
    ],
)
def test_matmul_add_stays_where_gemm_does_not_fit(x_shape, bias_shape, reuse):
    g = linear_graph(x_shape, bias_shape, reuse_matmul=reuse)
    g2 = mdsl.passes.run(g, ["fuse_matmul_add"])
    assert count(g2, "Gemm") == 0 and count(g2, "MatMul") == 1
    assert_preserves_results(g, g2)


def test_gemm_at_level_2_not_level_1():
    g = linear_graph(("N", 3), (5,))
    assert count(mdsl.optimize(g, level=1), "Gemm") == 0
    assert count(mdsl.optimize(g, level=2), "Gemm") == 1
