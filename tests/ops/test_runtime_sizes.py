"""Sizes read from tensor values at run time (ValueDims, DynamicSlice; docs/dynamic-shapes.md):
bound when the graph runs, range-checked, planned per call on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl.ir import serialize
from mdsl.ops.runtime_sizes import value_dims

BACKENDS = ["python", "c", "numba"]


def _run(g, backend, feeds):
    if backend == "python":
        return mdsl.interpret(g, feeds)
    return mdsl.compile(g, backend=backend)(**feeds)


def _ramp_graph():
    """y = ones(n, 2) + x, z = pad(x, [0, p]): two sizes fed as values."""
    with mdsl.Graph("ramp") as g:
        n = g.input("n", (), "int64")
        p = g.input("p", (2,), "int64")
        x = g.input("x", (2,))
        (length,) = value_dims(n)
        before, after = value_dims(p)
        g.output(mdsl.ops.constant_of_shape((length, 2), 1.0) + x, "y")
        g.output(mdsl.ops.pad(x, [before, after], constant_value=7.0), "z")
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_value_dims_are_bound_per_call_from_one_compile(backend):
    g = _ramp_graph()
    exe = None if backend == "python" else mdsl.compile(g, backend=backend)
    x = np.array([1.0, 2.0], np.float32)
    for n, p in [(3, (1, 0)), (1, (0, 2)), (0, (2, 2))]:
        feeds = {"n": np.int64(n), "p": np.array(p, np.int64), "x": x}
        out = mdsl.interpret(g, feeds) if exe is None else exe(**feeds)
        np.testing.assert_array_equal(out["y"], np.ones((n, 2), np.float32) + x)
        np.testing.assert_array_equal(out["z"], np.pad(x, p, constant_values=7.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [-1, 1 << 62])
def test_a_value_that_is_no_valid_size_is_an_execution_error_naming_the_node(backend, n):
    g = _ramp_graph()
    feeds = {"n": np.int64(n), "p": np.zeros(2, np.int64), "x": np.zeros(2, np.float32)}
    with pytest.raises(mdsl.ExecutionError, match=r"ValueDims.*negative or too large") as e:
        _run(g, backend, feeds)
    assert e.value.node == "ValueDims"


def test_value_dims_survive_dead_code_elimination_and_serialization():
    g = _ramp_graph()
    optimized = mdsl.optimize(g)
    assert [n.op_type for n in optimized].count("ValueDims") == 2
    again = serialize.graph_from_json(serialize.graph_to_json(g))
    feeds = {"n": np.int64(2), "p": np.array([1, 1], np.int64), "x": np.ones(2, np.float32)}
    np.testing.assert_array_equal(mdsl.interpret(again, feeds)["z"], mdsl.interpret(g, feeds)["z"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_slice_follows_onnx_clamping_and_negative_indices(backend):
    with mdsl.Graph("crop") as g:
        x = g.input("x", (4, 6))
        starts = g.input("starts", (2,), "int64")
        ends = g.input("ends", (2,), "int64")
        y = mdsl.ops.dynamic_slice(x, starts, ends, axes=(0, 1))
        g.output(y * 2.0, "y")
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    exe = None if backend == "python" else mdsl.compile(g, backend=backend)
    for s, e in [((1, -4), (3, 100)), ((0, 0), (4, 6)), ((3, 5), (1, 2))]:
        feeds = {"x": x, "starts": np.array(s), "ends": np.array(e)}
        out = mdsl.interpret(g, feeds) if exe is None else exe(**feeds)
        np.testing.assert_array_equal(out["y"], x[s[0] : e[0], s[1] : e[1]] * 2.0)
