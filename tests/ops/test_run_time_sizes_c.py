"""Pad and Reshape by sizes known only at run time, compiled with no callback: a constant
Pad over symbolic dims or by value-dim pads is a fill and a strided copy (two pointwise
kernels), ValueDims a copy, DynamicCrop (ONNX's negative pads) and DynamicReshape C
functions reporting the sizes they produced. Each is checked against the interpreter
(numpy.pad, slicing, ONNX Reshape's 0 and -1)."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl.ops.runtime_sizes import dynamic_crop, dynamic_reshape, value_dims
from tests.ops.native_checks import assert_native_and_equal


@pytest.mark.parametrize("backend", ["c", "numba"])
def test_a_pad_by_value_dims_is_a_fill_and_a_copy(backend):
    with mdsl.Graph("pad") as g:
        x = g.input("x", (2, 3), "int32")
        b0, b1, e0, e1 = value_dims(g.input("p", (4,), "int64"))
        g.output(mdsl.ops.pad(x, [b0, b1, e0, e1], constant_value=-7.0), "y")
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    pads = [(0, 0, 0, 0), (1, 2, 0, 3), (0, 0, 4, 0), (3, 1, 2, 5)]
    assert_native_and_equal(g, [{"x": x, "p": np.array(p, np.int64)} for p in pads], backend)


def test_a_pad_of_symbolic_dims_on_some_axes_is_generated_once_for_every_size():
    with mdsl.Graph("pad") as g:
        x = g.input("x", ("N", "M", 2))
        g.output(mdsl.ops.pad(x, [1, 0, 2, 3], axes=[1, -1], constant_value=0.5), "y")
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((n, m, 2)).astype(np.float32)} for n, m in [(1, 1), (3, 5)]]
    feeds.append({"x": np.zeros((0, 4, 2), np.float32)})  # an empty input
    assert_native_and_equal(g, feeds)
    exe = mdsl.compile(g, backend="c")
    for f in feeds:
        exe(**f)
    assert list(exe.variants()) == [()]


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_dynamic_crop_on_c_equals_the_interpreter(dtype):
    with mdsl.Graph("crop") as g:
        y = dynamic_crop(g.input("x", ("N", 4, 3), dtype), g.input("c", (6,), "int64"))
        g.output(y, "y")
    x = np.arange(5 * 4 * 3).reshape(5, 4, 3).astype(dtype)
    crops = [(0,) * 6, (1, 2, 0, 3, 1, 2), (0, 0, 0, 0, 0, 3), (5, 0, 0, 0, 0, 0)]
    assert_native_and_equal(g, [{"x": x, "c": np.array(c, np.int64)} for c in crops])


@pytest.mark.parametrize("crops", [(0, 3, 0, 0, 2, 0), (-1, 0, 0, 0, 0, 0), (0, 0, 0, 6, 0, 0)])
def test_a_crop_beyond_a_dim_or_negative_is_an_execution_error_on_c(crops):
    with mdsl.Graph("crop") as g:
        g.output(
            dynamic_crop(g.input("x", (5, 4, 3)), g.input("c", (6,), "int64"), name="Crop"), "y"
        )
    exe = mdsl.compile(g, backend="c")
    with pytest.raises(mdsl.ExecutionError, match="outside") as e:
        exe(x=np.zeros((5, 4, 3), np.float32), c=np.array(crops, np.int64))
    assert e.value.node == "Crop"


def _reshape_graph(allowzero=False):
    with mdsl.Graph("reshape") as g:
        x = g.input("x", ("N", 6), "float32")
        y = dynamic_reshape(x, g.input("s", (3,), "int64"), allowzero=allowzero, name="Shape3")
        g.output(y * 2.0, "y")
    return g


def test_dynamic_reshape_on_c_follows_onnx_zero_and_minus_one():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    shapes = [(2, 3, 4), (0, -1, 2), (-1, 1, 3), (4, 6, 1), (0, 0, 1)]
    feeds = [{"x": x, "s": np.array(s, np.int64)} for s in shapes]
    assert_native_and_equal(_reshape_graph(), feeds)
    # an empty x reshapes to zero sizes only (each dim is at most numel(x))
    empty = {"x": np.zeros((0, 6), np.float32), "s": np.array([0, 0, 0], np.int64)}
    assert_native_and_equal(_reshape_graph(allowzero=True), [empty, feeds[0]])


@pytest.mark.parametrize(
    "shape", [(5, 5, 1), (-1, -1, 6), (-2, 12, 1), (2, 0, 12), (7, -1, 1), (1 << 40, 1 << 40, 0)]
)
def test_a_run_time_shape_that_does_not_fit_is_an_execution_error_on_c(shape):
    exe = mdsl.compile(_reshape_graph(), backend="c")
    with pytest.raises(mdsl.ExecutionError, match="cannot") as e:
        exe(x=np.ones((2, 6), np.float32), s=np.array(shape, np.int64))
    assert e.value.node == "Shape3"
