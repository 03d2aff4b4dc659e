"""A channel shuffle (Reshape -> Transpose -> Reshape) runs as one copy kernel
(`mdsl.codegen.channel_shuffle`), NCHW or channels last between oneDNN convolutions, and
a oneDNN convolution's sum post-op adds into its residual's buffer in place when it is
the residual's last reader. Every case against the interpreter at 1 and 2 threads,
batch 2, channel and group counts off oneDNN's blocks of 8 and 16."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import kir, onednn

RNG = np.random.default_rng(1617)
needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _conv(g, h, cout, k, name, group=1, relu=True):
    cin = h.shape[1]
    w = _rand(cout, cin // group, k, k, scale=1 / np.sqrt(cin // group * k * k))
    b = g.const(f"{name}_b", _rand(cout))
    y = ops.conv2d(h, g.const(f"{name}_w", w), b, pads=k // 2, group=group)
    return ops.relu(y) if relu else y


def _shuffle(h, groups):
    n, c, height, width = h.shape
    h = ops.reshape(h, shape=(n, groups, c // groups, height, width), allowzero=False)
    h = ops.transpose(h, perm=(0, 2, 1, 3, 4))
    return ops.reshape(h, shape=(n, c, height, width), allowzero=False)


def _units(c: int, groups: int, pointwise_group: int, x_shape=(2, 5, 9, 9)):
    """A 3x3 stem, two ShuffleNet units (1x1 conv of `pointwise_group` groups + ReLU,
    shuffle of `groups`, depthwise 3x3, 1x1 conv, residual Add + ReLU) and a 3x3 head."""
    with mdsl.Graph("shuffle") as g:
        h = _conv(g, g.input("x", x_shape), c, 3, "stem")
        for i in range(2):
            y = _shuffle(_conv(g, h, c, 1, f"a{i}", pointwise_group), groups)
            y = _conv(g, y, c, 3, f"dw{i}", group=c, relu=False)
            y = _conv(g, y, c, 1, f"b{i}", pointwise_group, relu=False)
            h = ops.relu(y + h)
        g.output(_conv(g, h, 8, 3, "head"), "y")
    return g


def _assert_equals_interpreter(exe, g, x):
    for _ in range(2):  # the second call reuses the primitives and the arena
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
        )


def _shuffle_kernels(exe) -> list:
    return [k for k in exe.plan.kernels if "Transpose" in [n.op_type for n in k.nodes]]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("c", "groups"), [(45, 3), (35, 5)])
def test_shufflenet_units_run_their_shuffle_as_one_copy_and_equal_the_interpreter(
    c, groups, threads
):
    """ShuffleNet v1: grouped 1x1 convolutions (hand-written kernels), the shuffle's
    reshapes folded into its transpose, the tensors NCHW."""
    g = _units(c, groups, groups)
    exe = mdsl.compile(g, "c", threads=threads)
    shuffles = _shuffle_kernels(exe)
    assert len(shuffles) == 2
    assert all(
        [n.op_type for n in k.nodes] == ["Reshape", "Transpose", "Reshape"] for k in shuffles
    )
    assert not any(k.nodes[0].op_type == "Reshape" for k in exe.plan.kernels if k not in shuffles)
    _assert_equals_interpreter(exe, g, _rand(2, 5, 9, 9))


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("c", "groups"), [(36, 3), (30, 2)])
def test_a_shuffle_between_onednn_convolutions_copies_channels_last(c, groups, threads):
    """Dense 1x1 convolutions (oneDNN's NHWC `brgconv_1x1`) around the shuffle and the
    depthwise convolution: the whole chain stays NHWC, the shuffle permuting each pixel's
    channels, so only the stem reads NCHW."""
    g = _units(c, groups, 1)
    exe = mdsl.compile(g, "c", threads=threads)
    src = "\n".join(exe.sources.values())
    assert src.count("x NCHW") == 1
    assert len(re.findall(r"brdgmm_dw\S*: x NHWC -> NHWC", src)) == 2
    (shuffle, _) = _shuffle_kernels(exe)
    assert shuffle.shape == (2, 9, 9, c // groups, groups)  # images, pixels, channels
    _assert_equals_interpreter(exe, g, _rand(2, 5, 9, 9))


def _sum_aliases(exe) -> list[tuple[str, str]]:
    convs = [k for k in exe.plan.kernels if isinstance(k, kir.Conv) and k.residual]
    aliases = exe.plan.memory.aliases
    return [(k.out, k.residual) for k in convs if aliases.get(k.out) == k.residual]


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_a_sum_post_op_adds_into_its_last_read_residual_in_place(threads):
    """Both units' residual Adds are oneDNN sum post-ops reading the kept residual for the
    last time: the result takes the residual's buffer and the copy into it is skipped."""
    g = _units(36, 3, 1)
    exe = mdsl.compile(g, "c", threads=threads)
    assert len(_sum_aliases(exe)) == 2
    _assert_equals_interpreter(exe, g, _rand(2, 5, 9, 9))


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_a_residual_read_after_its_sum_post_op_keeps_its_buffer(threads):
    """The residual is read again after the convolution adding it: nothing is shared.
    (The shuffle's source is read by a Concat too: the transpose reads it all the same.)"""
    with mdsl.Graph("reread") as g:
        h = _conv(g, g.input("x", (2, 5, 9, 9)), 24, 3, "stem")
        a = _conv(g, h, 24, 1, "a")
        y = _conv(g, _shuffle(a, 3), 24, 3, "dw", group=24, relu=False)
        y = ops.relu(_conv(g, y, 24, 1, "b", relu=False) + h)
        g.output(_conv(g, ops.concat([y, h, a], axis=1), 8, 3, "head"), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert not _sum_aliases(exe)
    assert [n.op_type for n in _shuffle_kernels(exe)[0].nodes] == [
        "Reshape",
        "Transpose",
        "Reshape",
    ]
    _assert_equals_interpreter(exe, g, _rand(2, 5, 9, 9))


@pytest.mark.parametrize("threads", [1, 2])
def test_two_transposes_sharing_a_reshape_fold_once(threads):
    """MobileViT's folding of patches back into an image: Reshape, Transpose, Reshape,
    Transpose, Reshape. The middle reshape ends the first fold; the second transpose
    then reads what the first one wrote (it failed to compile: a dropped buffer)."""
    c, n_h, n_w, p = 6, 3, 4, 2
    with mdsl.Graph("fold_patches") as g:
        h = ops.tanh(g.input("x", (p * p, n_h * n_w, c)))
        h = ops.reshape(h, shape=(1, p * p, n_h * n_w, c), allowzero=False)
        h = ops.transpose(h, perm=(0, 3, 2, 1))
        h = ops.reshape(h, shape=(c * n_h, n_w, p, p), allowzero=False)
        h = ops.transpose(h, perm=(0, 2, 1, 3))
        g.output(ops.relu(ops.reshape(h, shape=(1, c, n_h * p, n_w * p), allowzero=False)), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    folded = [[n.op_type for n in k.nodes] for k in _shuffle_kernels(exe)]
    assert folded == [["Reshape", "Transpose", "Reshape"], ["Transpose"]]
    _assert_equals_interpreter(exe, g, _rand(p * p, n_h * n_w, c))
