"""A oneDNN convolution whose result ends with SiLU (x * sigmoid(x)) runs the primitive
without oneDNN's swish post-op and then mdsl's vector pass over its result
(`kir.Conv.silu`, `csrc/templates/c/silu.h.j2`). Checked against the interpreter and
float64: values over the whole range, NaN and +-inf, buffers that are no multiple of the
vector width, kept (NHWC) and NCHW results, a residual sum before the SiLU, batch 2, 1 and
2 threads, and the portable loop of machines without AVX-512."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import onednn
from mdsl.targets.c import render
from tests.runtime.machine import needs_avx512

RNG = np.random.default_rng(1818)
pytestmark = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _silu(y):
    return y * ops.sigmoid(y)


def _source(exe) -> str:
    return "\n".join(exe.sources.values())


def _swish_post_ops(src: str) -> int:
    """How many convolutions' comments list swish among oneDNN's fused post-ops."""
    return len(re.findall(r"; [^;*]*swish[^;*]* fused", src))


def _copy_graph(n: int, h: int, w: int) -> mdsl.Graph:
    """SiLU of a 3x3 convolution that copies its one input channel into three (weights
    1, -1 and 0.5 at the centre tap, no bias): its result is x, -x and x / 2 exactly."""
    weights = np.zeros((3, 1, 3, 3), np.float32)
    weights[:, 0, 1, 1] = (1.0, -1.0, 0.5)
    with mdsl.Graph("silu_copy") as g:
        x = g.input("x", (n, 1, h, w))
        g.output(_silu(ops.conv2d(x, g.const("w", weights), pads=1)), "y")
    return g


def _wide_range(n: int, h: int, w: int) -> np.ndarray:
    x = np.linspace(-100, 100, n * h * w, dtype=np.float32).reshape(n, 1, h, w)
    x[0, 0, 0, :6] = (-88.0, -87.0, -1e-30, 1e-30, 3e38, -3e38)
    return x


@pytest.mark.parametrize("threads", [1, 2])
def test_silu_after_the_primitive_is_within_4_ulp_over_the_whole_range(threads):
    n, h, w = 2, 37, 41  # 9,102 results: not a multiple of 16
    g = _copy_graph(n, h, w)
    exe = mdsl.compile(g, "c", threads=threads)
    assert "mdsl_silu_f32(" in _source(exe) and not _swish_post_ops(_source(exe))
    x = _wide_range(n, h, w)
    got = exe(x=x)["y"].astype(np.float64)
    wide = np.concatenate([x, -x, x * np.float32(0.5)], axis=1).astype(np.float64)
    with np.errstate(over="ignore"):
        truth = wide / (1.0 + np.exp(-wide))
    spacing = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
    # below -87.3, exp(x) is subnormal in float32: the pass gives -0 there (|truth| <
    # 1e-35), the interpreter a product of a subnormal
    normal = (wide > -87.3) & (np.abs(truth) > 1e-30)
    assert np.max(np.abs(got - truth)[normal] / spacing[normal]) <= 4
    assert np.max(np.abs(got - truth)[~normal]) < 1e-34
    np.testing.assert_allclose(got, mdsl.interpret(g, {"x": x})["y"], rtol=4e-7, atol=1e-34)


@pytest.mark.parametrize("flags", ["", "-mno-avx512f"])
def test_nan_and_infinities_give_what_the_interpreter_gives(flags, monkeypatch):
    """x * sigmoid(x) is inf at +inf and NaN at -inf and NaN (the zero taps beside an
    infinity make NaN too, in both); `-mno-avx512f` builds the portable loop."""
    monkeypatch.setenv("MDSL_CFLAGS", flags)
    g = _copy_graph(1, 5, 21)
    x = _rand(1, 1, 5, 21)
    x[0, 0, 0, 3], x[0, 0, 2, 10], x[0, 0, 4, 17] = np.inf, -np.inf, np.nan
    exe = mdsl.compile(g, "c", threads=1)
    assert "mdsl_silu_f32(" in _source(exe)
    got = exe(x=x)["y"]
    with np.errstate(invalid="ignore", over="ignore"):
        want = mdsl.interpret(g, {"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any() and np.isinf(got).any()
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=1e-30)


@pytest.mark.parametrize(
    "threads, cin, split", [(1, 13, False), (2, 13, False), (1, 24, False), (2, 24, True)]
)
def test_an_mbconv_chain_kept_and_an_nchw_result_equal_the_interpreter(
    threads, cin, split, monkeypatch
):
    """1x1 expand + SiLU -> depthwise 3x3 + SiLU (both kept in oneDNN's layout) -> 1x1
    project + residual -> 3x3 + SiLU, a graph output (NCHW: reordered, then the pass);
    `split`: the C source in several units (`render.KERNEL_UNIT_LINES`), each kernel
    unit with its own copy of the helper."""
    if split:
        monkeypatch.setenv("MDSL_COMPILE_CACHE", "0")
        monkeypatch.setattr(render, "SPLIT_CALLS", 0)
        monkeypatch.setattr(render, "KERNEL_UNIT_LINES", 30)
    cout = 3 * cin
    with mdsl.Graph("mbconv_silu") as g:
        x = g.input("x", (2, cin, 9, 11))

        def conv(h, co, k, name, group=1):
            fan = h.shape[1] // group * k * k
            w = g.const(f"{name}_w", _rand(co, h.shape[1] // group, k, k, scale=fan**-0.5))
            return ops.conv2d(h, w, g.const(f"{name}_b", _rand(co)), pads=k // 2, group=group)

        h = _silu(conv(_silu(conv(x, cout, 1, "expand")), cout, 3, "dw", group=cout))
        y = conv(h, cin, 1, "project") + x
        g.output(_silu(conv(y, 7, 3, "head")), "y")
    exe = mdsl.compile(mdsl.optimize(g, level=2), "c", threads=threads)
    src = _source(exe)
    assert src.count("SiLU after it") == 3 and not _swish_post_ops(src)
    assert (len(exe.sources) > 2) == split
    assert "brdgmm_dw" in src and "-> NCHW; bias fused; SiLU after it" in src
    feeds = {"x": _rand(2, cin, 9, 11)}
    for _ in range(2):  # the second call finds the first call's buffers
        np.testing.assert_allclose(
            exe(**feeds)["y"], mdsl.interpret(g, feeds)["y"], rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("threads", [1, 2])
def test_a_residual_sum_before_the_silu_and_a_silu_before_one(threads):
    """SiLU(conv + r) is the sum post-op, then the pass; conv -> SiLU -> + r keeps the
    swish post-op (it comes before the sum)."""
    with mdsl.Graph("silu_sum") as g:
        x = g.input("x", (2, 16, 10, 10))
        r = g.input("r", (2, 16, 10, 10))

        def conv(h, name):
            w = g.const(f"{name}_w", _rand(16, 16, 3, 3, scale=1 / 12))
            return ops.conv2d(h, w, g.const(f"{name}_b", _rand(16)), pads=1)

        g.output(_silu(conv(x, "a") + r), "after_sum")
        g.output(_silu(conv(x, "b")) + r, "before_sum")
    exe = mdsl.compile(g, "c", threads=threads)
    src = _source(exe)
    assert "bias, sum fused; SiLU after it" in src and _swish_post_ops(src) == 1
    feeds = {"x": _rand(2, 16, 10, 10), "r": _rand(2, 16, 10, 10)}
    want, got = mdsl.interpret(g, feeds), exe(**feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_sigmoid_after_a_convolution_is_oneDNN_s_logistic_post_op(threads):
    """A squeeze-and-excitation's gate (pool, 1x1 + SiLU, 1x1 + Sigmoid over (n, c, 1, 1)
    tensors) and a 3x3 + Sigmoid of 13 channels; a Sigmoid that is half of a SiLU stays
    the SiLU."""
    with mdsl.Graph("gates") as g:
        x = g.input("x", (2, 13, 9, 7))
        w3 = g.const("w3", _rand(13, 13, 3, 3, scale=1 / 11))
        h = ops.sigmoid(ops.conv2d(x, w3, g.const("b3", _rand(13)), pads=1))
        pooled = ops.global_average_pool(_silu(ops.conv2d(h, w3, pads=1)))
        squeezed = _silu(
            ops.conv2d(pooled, g.const("w1", _rand(5, 13, 1, 1)), g.const("b1", _rand(5)))
        )
        gate = ops.conv2d(squeezed, g.const("w2", _rand(13, 5, 1, 1)), g.const("b2", _rand(13)))
        g.output(h * ops.sigmoid(gate), "y")
    exe = mdsl.compile(mdsl.optimize(g, level=2), "c", threads=threads)
    src = _source(exe)
    assert src.count("bias, logistic fused") == 2 and src.count("SiLU after it") == 2
    feeds = {"x": _rand(2, 13, 9, 7)}
    np.testing.assert_allclose(
        exe(**feeds)["y"], mdsl.interpret(g, feeds)["y"], rtol=1e-5, atol=1e-6
    )


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
def test_a_blocked_result_with_padding_channels(threads):
    """A stem on 3 channels (oneDNN's `jit` kernel, nChw16c) of 24 channels + SiLU: the
    pass runs over 32 channels a pixel, 8 of them padding, which the 1x1 after it reads."""
    with mdsl.Graph("stem_silu") as g:
        x = g.input("x", (2, 3, 17, 17))
        w = g.const("w", _rand(24, 3, 3, 3, scale=0.3))
        h = _silu(ops.conv2d(x, w, g.const("b", _rand(24)), strides=2, pads=1))
        g.output(ops.conv2d(h, g.const("w1", _rand(13, 24, 1, 1, scale=0.2)), pads=0), "y")
    exe = mdsl.compile(mdsl.optimize(g, level=2), "c", threads=threads)
    assert "-> nChw16c; bias fused; SiLU after it" in _source(exe)
    feeds = {"x": _rand(2, 3, 17, 17)}
    for _ in range(2):
        np.testing.assert_allclose(
            exe(**feeds)["y"], mdsl.interpret(g, feeds)["y"], rtol=1e-5, atol=1e-5
        )
