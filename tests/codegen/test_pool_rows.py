"""2-D pools run one axis at a time (`mdsl.targets.c.pool_rows`): equal to the interpreter
and to PyTorch for strides 1-3, padding, dilation, ceil mode, both average divisors, NaN
and -inf anywhere in a window, a symbolic batch on two threads; planes too wide for the
stack keep the row loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops

SEPARABLE = "float rows["  # the plane's row reductions, declared by pool_rows

MAX_CASES = [
    # (input shape, kernel, strides, pads, dilations, ceil_mode)
    ((2, 3, 17, 20), 3, 2, 1, 1, False),  # ShuffleNet's and ResNet's stem pool, odd sizes
    ((1, 2, 16, 16), 2, 2, 0, 1, False),  # VGG's
    ((1, 2, 9, 11), (2, 3), 1, 0, 2, False),  # dilated, stride 1
    ((1, 2, 10, 11), 3, 3, 0, 1, True),  # ceil mode: a last window cut by the end
    ((1, 1, 12, 13), 5, 1, 2, 1, False),
    ((1, 2, 23, 23), 5, 3, 2, 1, False),  # stride 3: three phases
]


def _compile(build, shape, threads=1):
    with mdsl.Graph("pool") as g:
        g.output(build(g.input("x", shape)), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    return g, exe


def _with_nan_and_inf(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    flat = x.reshape(-1)
    flat[:: max(1, flat.size // 7)] = np.nan  # first element, edges and interior
    flat[3 :: max(1, flat.size // 5)] = -np.inf
    return x


@pytest.mark.parametrize("shape, kernel, strides, pads, dilations, ceil", MAX_CASES)
def test_max_pools_equal_the_interpreter_and_torch(shape, kernel, strides, pads, dilations, ceil):
    def build(x):
        return ops.max_pool(
            x, kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil
        )

    g, exe = _compile(build, shape)
    assert SEPARABLE in exe.sources["pool.c"]
    plain = np.random.default_rng(shape[-1]).standard_normal(shape).astype(np.float32)
    for x in (plain, _with_nan_and_inf(plain)):
        got = exe(x=x)["y"]
        np.testing.assert_array_equal(got, mdsl.interpret(g, {"x": x})["y"])
        want = F.max_pool2d(torch.from_numpy(x), kernel, strides, pads, dilations, ceil)
        np.testing.assert_array_equal(got, want.numpy())


AVG_CASES = [
    # (input shape, kernel, strides, pads, ceil_mode, count_include_pad)
    ((2, 3, 17, 20), 3, 2, 1, False, False),  # ShuffleNet's: padding not counted
    ((2, 3, 17, 20), 3, 2, 1, False, True),
    ((1, 2, 7, 9), 2, 2, 0, True, False),  # ceil mode: windows of one row or column
    ((1, 2, 10, 10), 3, 3, 1, True, True),
    ((1, 4, 14, 14), 3, 1, 1, False, False),  # Inception's stride-1 pools
]


@pytest.mark.parametrize("shape, kernel, strides, pads, ceil, counted", AVG_CASES)
def test_average_pools_equal_the_interpreter(shape, kernel, strides, pads, ceil, counted):
    def build(x):
        return ops.average_pool(
            x, kernel, strides=strides, pads=pads, ceil_mode=ceil, count_include_pad=counted
        )

    g, exe = _compile(build, shape)
    assert SEPARABLE in exe.sources["pool.c"]
    x = np.random.default_rng(shape[-1]).standard_normal(shape).astype(np.float32)
    got = exe(x=x)["y"]
    # rows are summed first, then columns: another order of the same float additions
    np.testing.assert_allclose(got, mdsl.interpret(g, {"x": x})["y"], rtol=1e-6, atol=1e-6)
    if not ceil:  # torch's ceil-mode divisor differs from ONNX's at the end
        want = F.avg_pool2d(torch.from_numpy(x), kernel, strides, pads, count_include_pad=counted)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
    nan = x.copy()
    nan[0, 0, 1, 1] = np.nan
    got = exe(x=nan)["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(mdsl.interpret(g, {"x": nan})["y"]))


def test_a_symbolic_batch_on_two_threads():
    def build(x):
        return ops.max_pool(x, 3, strides=2, pads=1)

    g, exe = _compile(build, ("N", 8, 33, 34), threads=2)
    assert SEPARABLE in exe.sources["pool.c"]
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 8, 33, 34)).astype(np.float32)
        np.testing.assert_array_equal(exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"])


def test_planes_too_wide_for_the_stack_keep_the_row_loop():
    def build(x):
        return ops.max_pool(x, 3, strides=1, pads=1)

    g, exe = _compile(build, (1, 1, 130, 130))  # 130 x 130 row reductions: 66 KiB
    assert SEPARABLE not in exe.sources["pool.c"]
    x = np.random.default_rng(0).standard_normal((1, 1, 130, 130)).astype(np.float32)
    np.testing.assert_array_equal(exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"])
