"""Compress and Unique compiled for C (`mdsl/ops/filtering.c`): no callback, the count
reported by the C function bound for the kernels after it, results equal to the
interpreter's (numpy.unique, as ONNX's reference) on edge cases: empty inputs and
results, all-equal inputs, NaN, every axis, first-occurrence order, integer types."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.ops.native_checks import assert_native_and_equal

SUM_RTOL = {"total": 1e-5}  # a float sum: the kernel's summation order

UNIQUE_OUTPUTS = ("y", "first", "inverse", "counts")


def _unique_graph(shape, dtype, total=True, **attrs) -> mdsl.Graph:
    """Unique's outputs, and a kernel reading the values at their run-time count."""
    with mdsl.Graph("unique") as g:
        outs = ops.unique(g.input("x", shape, dtype), **attrs)
        for out, name in zip(outs, UNIQUE_OUTPUTS):
            g.output(out, name)
        if total:
            g.output(ops.reduce_sum(ops.cast(outs[0], to="float32"), keepdims=True), "total")
    return g


UNIQUE_FLAT = [
    np.array([2, 1, 1, 3, 4, 3], np.float32),
    np.array([5.0], np.float32),
    np.zeros(0, np.float32),  # empty input, empty result
    np.full(7, -1.5, np.float32),  # all equal
    np.array([np.nan, 1, np.nan, -0.0, 0.0, -np.inf, 3], np.float32),  # NaNs merge
]


@pytest.mark.parametrize("sorted_", [True, False])
def test_unique_of_a_flattened_input_equals_the_interpreter(sorted_):
    g = _unique_graph(("N",), "float32", sorted=sorted_)
    assert_native_and_equal(g, [{"x": x} for x in UNIQUE_FLAT], rtol=SUM_RTOL)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
@pytest.mark.parametrize("sorted_", [True, False])
def test_unique_along_an_axis_equals_the_interpreter(axis, sorted_):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2, (4, 3, 2)).astype(np.int64)
    x[2] = x[0]  # repeated slices along axis 0
    g = _unique_graph((4, 3, 2), "int64", axis=axis, sorted=sorted_)
    assert_native_and_equal(g, [{"x": x}, {"x": np.zeros_like(x)}], rtol=SUM_RTOL)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "float64", "bool"])
def test_unique_compares_each_dtype_by_its_values(dtype):
    x = np.array([3, -1, 0, 3, 100, -1, 0, 2], np.int64).astype(dtype)
    g = _unique_graph((8,), dtype)
    assert_native_and_equal(g, [{"x": x}], rtol=SUM_RTOL)


@pytest.mark.parametrize("axis", [None, 0, 1, -2])
def test_compress_equals_the_interpreter(axis):
    with mdsl.Graph("compress") as g:
        x = g.input("x", ("N", 3))
        y = ops.compress(x, g.input("c", ("M",), "bool"), axis=axis)
        g.output(y * 2.0, "y")
    rng = np.random.default_rng(4)
    length = {None: 15, 0: 5, 1: 3, -2: 5}[axis]
    feeds = [  # a condition as long as the axis, or shorter (drops the rest)
        {"x": rng.standard_normal((5, 3)).astype(np.float32), "c": rng.random(m) > 0.5}
        for m in (length, 2, 1)
    ]
    feeds += [
        {"x": np.ones((5, 3), np.float32), "c": np.zeros(length, bool)},  # nothing kept
        {"x": np.ones((5, 3), np.float32), "c": np.ones(length, bool)},  # everything kept
        {"x": np.ones((0, 3), np.float32), "c": np.zeros(0, bool)},  # empty input
    ]
    assert_native_and_equal(g, feeds, rtol=SUM_RTOL)


def test_a_compress_condition_longer_than_the_axis_is_an_execution_error():
    with mdsl.Graph("compress") as g:
        y = ops.compress(g.input("x", ("N",)), g.input("c", ("M",), "bool"), name="Keep")
        g.output(y, "y")
    with pytest.raises(mdsl.ExecutionError, match="Keep"):
        mdsl.compile(g, backend="c")(x=np.ones(2, np.float32), c=np.ones(3, bool))


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "uint8"])
@pytest.mark.parametrize("sorted_", [True, False])
def test_unique_of_many_elements_sorts_every_key_byte(dtype, sorted_):
    """Thousands of elements, negatives and wide values: every radix pass of the C sort."""
    rng = np.random.default_rng(5)
    wide = (
        rng.integers(-(2**40), 2**40, 3000) if dtype == "int64" else rng.integers(-300, 300, 3000)
    )
    x = wide.astype(dtype) if dtype != "float32" else (wide / 7).astype(dtype)
    if dtype == "uint8":
        x = rng.integers(0, 256, 3000).astype(dtype)
    x[::5] = x[1]  # many repeats of one value
    g = _unique_graph(("N",), dtype, total=False, sorted=sorted_)
    assert_native_and_equal(g, [{"x": x}, {"x": x[:1]}], rtol=SUM_RTOL)
