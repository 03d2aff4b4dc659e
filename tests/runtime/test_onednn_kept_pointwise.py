"""Element-wise kernels between oneDNN convolutions run in the layout oneDNN keeps the
tensors in (`mdsl.codegen.blocked`): DenseNet's pre-activation BatchNorm + ReLU between a
channel Concat and a convolution, and Caffe2's BatchNorm + Mul + Add folded into the
convolution before it. Every case against the interpreter, at 1 and 2 threads, batch 2,
channel counts that are not a multiple of oneDNN's 8 or 16."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import onednn
from tests.runtime.machine import needs_avx512

RNG = np.random.default_rng(1616)
needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)
KEPT = r"(NHWC|nChw\d+c)"


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _bn(g, h, name):
    c = h.shape[1]
    params = [_rand(c, scale=0.5) + 1, _rand(c), _rand(c), np.abs(_rand(c)) + 0.5]
    consts = [g.const(f"{name}_{i}", p) for i, p in enumerate(params)]
    return ops.relu(ops.batch_norm(h, *consts, epsilon=1e-5))


def _conv(g, h, cout, k, name, relu=True):
    w = _rand(cout, h.shape[1], k, k, scale=1 / np.sqrt(h.shape[1] * k * k))
    y = ops.conv2d(h, g.const(f"{name}_w", w), g.const(f"{name}_b", _rand(cout)), pads=k // 2)
    return ops.relu(y) if relu else y


def _assert_equals_interpreter(exe, g, x):
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
    )


def _dense_blocks():
    """A stem (conv + ReLU, max pool), two DenseNet layers (BN + ReLU -> 1x1 conv + ReLU
    -> 3x3 conv, Concat), 13 + 7 channels, and a transition (BN + ReLU -> 1x1 conv). The
    second BN also multiplies by a graph input: an NCHW operand beside the kept one."""
    with mdsl.Graph("dense") as g:
        xi = g.input("x", (2, 5, 9, 9))
        m = g.input("m", (2, 20, 9, 9))
        h = ops.max_pool(_conv(g, xi, 13, 3, "stem"), 3, strides=1, pads=1)
        for i, scale in enumerate((None, m)):
            pre = _bn(g, h, f"bn{i}")
            pre = pre * scale if scale is not None else pre
            y = _conv(g, _conv(g, pre, 16, 1, f"a{i}"), 7, 3, f"b{i}", relu=False)
            h = ops.concat([h, y], axis=1)
        g.output(_conv(g, _bn(g, h, "last"), 10, 1, "transition"), "y")
    return g


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_densenet_pre_activation_runs_in_the_kept_layout_and_equals_the_interpreter(threads):
    g = _dense_blocks()
    exe = mdsl.compile(g, "c", threads=threads)
    src = "\n".join(exe.sources.values())
    # only the stem reads the NCHW input: every BN + ReLU between a Concat and a 1x1
    # convolution reads and writes the kept layout
    assert src.count("x NCHW") == 1 and len(re.findall(rf"x {KEPT}", src)) == 5
    feeds = {"x": _rand(2, 5, 9, 9), "m": _rand(2, 20, 9, 9)}
    expect = mdsl.interpret(g, feeds)["y"]
    for _ in range(2):
        np.testing.assert_allclose(exe(feeds)["y"], expect, rtol=1e-4, atol=1e-4)


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cout", [32, 24])  # 24: not whole blocks of 16, stays NCHW
def test_an_element_wise_kernel_reads_the_blocked_stem(cout, threads):
    """A 7x7 stem on 3 channels (oneDNN's `jit` kernel: nChw16c) -> max pool -> BN +
    ReLU -> 3x3 conv: the pre-activation reads nChw16c and writes what the conv takes."""
    with mdsl.Graph("stem") as g:
        xi = g.input("x", (2, 3, 23, 23))
        w = g.const("w", _rand(cout, 3, 7, 7, scale=0.1))
        h = ops.relu(ops.conv2d(xi, w, g.const("b", _rand(cout)), pads=3, strides=2))
        h = _bn(g, ops.max_pool(h, 3, strides=2, pads=1), "bn")
        g.output(_conv(g, h, 8, 3, "c"), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    src = "\n".join(exe.sources.values())
    if cout == 32:
        assert re.search(r"max pooling by hand: nChw16c -> nChw16c", src)
    _assert_equals_interpreter(exe, g, _rand(2, 3, 23, 23))


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_caffe2_batchnorm_folds_into_the_conv_and_the_chain_stays_kept(threads):
    """Conv -> BN -> Mul -> Add (per channel) -> ReLU, twice, 11 channels: both fold into
    their convolution, whose ReLU becomes a post-op, so the tensor between stays kept."""
    with mdsl.Graph("caffe2") as g:
        h = g.input("x", (2, 6, 10, 10))
        for i in range(2):
            h = _conv(g, h, 11, 3, f"c{i}", relu=False)
            h = ops.batch_norm(h, *(g.const(f"p{i}{j}", np.abs(_rand(11)) + 0.5) for j in range(4)))
            h = h * g.const(f"s{i}", _rand(11, 1, 1)) + g.const(f"t{i}", _rand(11, 1, 1))
            h = ops.relu(h)
        g.output(h, "y")
    exe = mdsl.compile(mdsl.optimize(g, level=2), "c", threads=threads)
    src = "\n".join(exe.sources.values())
    assert src.count("bias, relu fused") == 2 and len(re.findall(rf"-> {KEPT};", src)) == 1
    _assert_equals_interpreter(exe, g, _rand(2, 6, 10, 10))


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_a_tf_same_pad_folds_into_the_depthwise_conv_and_the_chain_stays_kept(threads):
    """Hugging Face's MobileNetV2: 1x1 expand -> Pad (0 before, 1 after) -> 3x3 depthwise
    stride 2 -> 1x1 project; 24 channels expanded to 40 (not whole blocks of 16)."""
    with mdsl.Graph("same") as g:
        h = _conv(g, g.input("x", (2, 24, 12, 12)), 40, 1, "expand")
        h = ops.pad(h, (0, 0, 0, 0, 0, 0, 1, 1))
        wd = g.const("wd", _rand(40, 1, 3, 3, scale=0.3))
        h = ops.clip(ops.conv2d(h, wd, g.const("bd", _rand(40)), strides=2, group=40), 0.0, 6.0)
        g.output(_conv(g, h, 16, 1, "project", relu=False), "y")
    exe = mdsl.compile(mdsl.optimize(g, level=2), "c", threads=threads)
    src = "\n".join(exe.sources.values())
    assert "Pad" not in src and len(re.findall(rf"x {KEPT}", src)) == 2
    _assert_equals_interpreter(exe, g, _rand(2, 24, 12, 12))


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cout", [32, 24])  # 24: nChw16c padded to 32 channels
def test_a_conv_reads_a_kept_tensor_of_another_layout_through_one_reorder(cout, threads):
    """ResNet's stem: 7x7 on 3 channels (`jit`, nChw16c) -> max pool -> two 1x1 convs
    (`brgconv_1x1`, NHWC): the pool runs on oneDNN in nChw16c and the first 1x1 reorders
    its source from it once, keeping the NHWC copy the second reads, instead of the stem
    writing NCHW for a hand-written pool."""
    with mdsl.Graph("stem") as g:
        xi = g.input("x", (2, 3, 30, 30))
        w = g.const("w", _rand(cout, 3, 7, 7, scale=0.1))
        h = ops.relu(ops.conv2d(xi, w, g.const("b", _rand(cout)), pads=3, strides=2))
        h = ops.max_pool(h, 3, strides=2, pads=1)
        a = _conv(g, _conv(g, h, 16, 1, "a"), 16, 3, "a3")
        g.output(_conv(g, h, 16, 1, "b", relu=False) + a, "y")
    exe = mdsl.compile(g, "c", threads=threads)
    src = "\n".join(exe.sources.values())
    assert re.search(r"max pooling by hand: nChw16c -> nChw16c", src)
    assert src.count("x nChw16c (kept in NHWC for other kernels)") == 1
    assert src.count("x nChw16c") == 1
    _assert_equals_interpreter(exe, g, _rand(2, 3, 30, 30))


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_silu_runs_after_the_primitive_and_an_efficientnet_block_equals_the_interpreter(threads):
    """EfficientNet's MBConv: 1x1 expand + SiLU -> 3x3 depthwise + SiLU -> squeeze and
    excitation (global pool, 1x1 + SiLU, 1x1 + Sigmoid, Mul) -> 1x1 project + residual;
    20 channels expanded to 60."""
    with mdsl.Graph("mbconv") as g:
        xi = g.input("x", (2, 20, 11, 11))

        def conv(h, cout, k, name, group=1, act=True):
            w = _rand(cout, h.shape[1] // group, k, k, scale=1 / np.sqrt(h.shape[1] * k * k))
            b = g.const(f"{name}_b", _rand(cout))
            y = ops.conv2d(h, g.const(f"{name}_w", w), b, pads=k // 2, group=group)
            return y * ops.sigmoid(y) if act else y

        h = conv(conv(xi, 60, 1, "expand"), 60, 3, "dw", group=60)
        s = conv(conv(ops.global_average_pool(h), 5, 1, "se1"), 60, 1, "se2", act=False)
        g.output(conv(h * ops.sigmoid(s), 20, 1, "project", act=False) + xi, "y")
    exe = mdsl.compile(mdsl.optimize(g, level=2), "c", threads=threads)
    src = "\n".join(exe.sources.values())
    # SiLU is mdsl's pass after the primitive, not oneDNN's swish post-op (test_onednn_silu)
    assert "bias fused; SiLU after it" in src and re.search(
        rf"brdgmm_dw\S*: x {KEPT} -> {KEPT}", src
    )
    # the global pool reads the depthwise result in its layout (oneDNN's pooling), the
    # excitation (convs and Mul) runs in it, and the projection reads it
    assert re.search(rf"oneDNN avg pooling: {KEPT}", src) and src.count("x NCHW") == 1
    _assert_equals_interpreter(exe, g, _rand(2, 20, 11, 11))


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_a_concat_read_as_nchw_copies_its_kept_inputs_from_their_layout(threads):
    """DenseNet's last block: the last Concat is read by a global average pool (NCHW), so
    it stays NCHW, but the tensors before it stay kept and its copies reorder them."""
    with mdsl.Graph("last_block") as g:
        h = ops.max_pool(_conv(g, g.input("x", (2, 5, 9, 9)), 13, 3, "stem"), 3, 1, pads=1)
        for i in range(2):
            y = _conv(g, _conv(g, _bn(g, h, f"bn{i}"), 16, 1, f"a{i}"), 7, 3, f"b{i}", False)
            h = ops.concat([h, y], axis=1)
        g.output(ops.global_average_pool(h), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    src = "\n".join(exe.sources.values())
    assert len(re.findall(rf"-> {KEPT}", src)) == 7 and "-> NCHW" not in src  # 5 convs, 2 pools
    _assert_equals_interpreter(exe, g, _rand(2, 5, 9, 9))


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cout", [32, 24])  # 24: padded nChw16c, the row kernel NCHW
def test_a_global_average_pool_of_a_kept_tensor_runs_on_onednn(cout, threads):
    with mdsl.Graph("gap") as g:
        xi = g.input("x", (2, 3, 21, 21))
        w = g.const("w", _rand(cout, 3, 7, 7, scale=0.1))
        h = ops.relu(ops.conv2d(xi, w, g.const("b", _rand(cout)), pads=3, strides=2))
        g.output(ops.global_average_pool(h), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    src = "\n".join(exe.sources.values())
    assert ("oneDNN avg pooling: nChw16c" in src) == (cout == 32)
    _assert_equals_interpreter(exe, g, _rand(2, 3, 21, 21))
