"""Convolutions computed by oneDNN in the C target (`mdsl.codegen.onednn`) against
PyTorch and the interpreter, and the hand-written kernels they replace: both paths run
where oneDNN is installed; without it the C target keeps its own kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import onednn

RNG = np.random.default_rng(1617)
needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _source(exe) -> str:
    return "\n".join(exe.sources.values())


CASES = [
    # (cin, cout, size, kernel, stride, pad, dilation, group, residual)
    (16, 16, 12, 3, 1, 1, 1, 1, True),
    (3, 8, 17, 7, 2, 3, 1, 1, False),  # a ResNet stem
    (8, 16, 11, 3, 2, 1, 1, 1, False),
    (64, 64, 9, 3, 1, 2, 2, 4, False),  # grouped, dilated
    (32, 48, 10, 5, 3, 0, 1, 2, False),  # no padding, stride 3, uneven end
]


def _graph(case, x_shape, w, b):
    *_, stride, pad, dil, group, residual = case
    with mdsl.Graph("conv") as g:
        xi = g.input("x", x_shape)
        y = ops.conv2d(
            xi,
            g.const("w", w),
            g.const("b", b),
            strides=stride,
            pads=pad,
            dilations=dil,
            group=group,
        )
        if residual:
            y = y + xi
        g.output(ops.relu(y), "y")
    return g


def _torch(case, x, w, b):
    _, _, _, _, stride, pad, dil, group, residual = case
    y = F.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, pad, dil, group
    )
    return F.relu(y + torch.from_numpy(x) if residual else y).numpy()


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "ci{}-co{}-s{}-k{}-st{}-p{}-d{}-g{}-r{}".format(*c)
)
def test_conv_by_onednn_with_bias_relu_and_residual_equals_torch(case, threads):
    cin, cout, size, k, *_, group, _r = case
    x, w, b = _rand(2, cin, size, size), _rand(cout, cin // group, k, k), _rand(cout)
    g = _graph(case, x.shape, w, b)
    exe = mdsl.compile(g, "c", threads=threads)
    assert "mdsl_dnnl_conv_run(" in _source(exe)
    expect = _torch(case, x, w, b)
    for _ in range(5):  # the first call makes the primitive; both team sizes run
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)
    with onednn.disabled():  # a static build's plan is made by its first call
        hand = mdsl.compile(g, "c", threads=threads)
        mine = hand(x=x)["y"]
    assert "mdsl_dnnl" not in _source(hand)
    np.testing.assert_allclose(mine, expect, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_1x1_depthwise_and_im2col_convs_keep_the_hand_written_kernels():
    x = _rand(1, 12, 10, 10)
    with mdsl.Graph("kept") as g:
        xi = g.input("x", x.shape)
        h = ops.conv2d(xi, g.const("w1", _rand(12, 12, 1, 1)))
        h = ops.conv2d(h, g.const("w2", _rand(12, 1, 3, 3)), pads=1, group=12)
        # 3 channels per group: oneDNN would run its im2col `gemm` kernel
        g.output(ops.conv2d(h, g.const("w3", _rand(12, 3, 3, 3)), pads=1, group=4), "y")
    exe = mdsl.compile(g, "c")
    assert "mdsl_dnnl" not in _source(exe)
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
    )


@needs_onednn
def test_a_residual_block_by_onednn_equals_the_interpreter_and_a_symbolic_batch_is_specialized():
    c = 16
    w1, w2 = _rand(c, c, 3, 3), _rand(c, c, 3, 3)
    with mdsl.Graph("block") as g:
        xi = g.input("x", ("N", c, 9, 9))
        h = ops.relu(ops.conv2d(xi, g.const("w1", w1), pads=1))
        g.output(ops.relu(ops.conv2d(h, g.const("w2", w2), pads=1) + xi), "y")
    exe = mdsl.compile(g, "c")
    for batch in (1, 3):
        x = _rand(batch, c, 9, 9)
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
        )


def test_without_onednn_plans_use_the_hand_written_kernels():
    x, w = _rand(1, 4, 8, 8), _rand(4, 4, 3, 3)
    with mdsl.Graph("hand") as g:
        g.output(ops.conv2d(g.input("x", x.shape), g.const("w", w), pads=1), "y")
    with onednn.disabled():
        assert not onednn.available()
        exe = mdsl.compile(g, "c")
        y = exe(x=x)["y"]
    assert "mdsl_dnnl" not in _source(exe)
    assert "mdsl_pc_panel(rows" in _source(exe)
    np.testing.assert_allclose(y, mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_saved_executable_names_onednn_and_refuses_to_load_where_it_is_missing(
    tmp_path, monkeypatch
):
    x, w = _rand(1, 16, 9, 9), _rand(16, 16, 3, 3)
    with mdsl.Graph("saved_conv") as g:
        g.output(ops.relu(ops.conv2d(g.input("x", x.shape), g.const("w", w), pads=1)), "y")
    exe = mdsl.compile(g, "c")
    expect = exe(x=x)["y"]
    [variant] = exe.variants().values()
    assert str(onednn.library_path()) in variant.linked_libraries()
    exe.save(tmp_path / "conv.exe")
    [entry] = json.loads((tmp_path / "conv.exe" / "manifest.json").read_text())["variants"]
    # found by name where it is loaded, not at this machine's path
    assert entry["system_libraries"] == [onednn.SONAME] and entry["custom_libraries"] == []
    np.testing.assert_array_equal(mdsl.load_executable(tmp_path / "conv.exe")(x=x)["y"], expect)
    monkeypatch.setattr(onednn, "library_path", lambda: None)  # a machine without the wheel
    with pytest.raises(mdsl.CompileError, match=r"links libdnnl\.so\.3, which is not installed"):
        mdsl.load_executable(tmp_path / "conv.exe")
