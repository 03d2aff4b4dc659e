"""`tensor[index_tensor]`: an integer Tensor index on one axis records a Gather node."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl


def _ops(g):
    return [n.op_type for n in g.nodes if n.op_type not in ("Input", "Output")]


def test_tensor_index_records_gather_on_its_axis():
    with mdsl.Graph() as g:
        table = g.input("table", (10, 4))
        ids = g.input("ids", ("B", "T"), "int64")
        y = table[ids]
        g.output(y, "y")
    assert _ops(g) == ["Gather"]
    assert y.producer.attrs["axis"] == 0
    assert y.shape == (mdsl.Dim("B"), mdsl.Dim("T"), 4)
    table_v = np.arange(40, dtype=np.float32).reshape(10, 4)
    ids_v = np.array([[9, -1, 0]], dtype=np.int64)
    np.testing.assert_array_equal(
        mdsl.interpret(g, {"table": table_v, "ids": ids_v})["y"], table_v[ids_v]
    )


def test_tensor_index_after_slices_ints_and_new_axes_lands_where_numpy_puts_it():
    x_v = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    i_v = np.array([2, 0, -1], dtype=np.int32)
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3, 4, 5))
        i = g.input("i", (3,), "int32")
        g.output(x[None, 1, i, ::2], "a")
        g.output(x[..., 1:, i], "b")
    assert _ops(g) == ["Slice", "Squeeze", "Unsqueeze", "Gather", "Slice", "Gather"]
    got = mdsl.interpret(g, {"x": x_v, "i": i_v})
    np.testing.assert_array_equal(got["a"], x_v[None, 1, i_v, ::2])
    np.testing.assert_array_equal(got["b"], x_v[..., 1:, i_v])


def test_out_of_range_index_fails_at_run_time_naming_the_index():
    with mdsl.Graph() as g:
        x = g.input("x", (3, 2))
        g.output(x[g.input("i", (1,), "int64")], "y")
    feeds = {"x": np.zeros((3, 2), np.float32), "i": np.array([3], np.int64)}
    with pytest.raises(mdsl.ExecutionError, match="Gather index 3 is out of range for axis 0"):
        mdsl.interpret(g, feeds)


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (lambda x, i, m: x[i, :, 0], "index in two steps"),
        (lambda x, i, m: x[i, i], "only one Tensor index"),
        (lambda x, i, m: x[m], "boolean masks"),
    ],
)
def test_unsupported_tensor_indices_say_why(index, message):
    with mdsl.Graph() as g:
        x = g.input("x", (3, 3, 3))
        i = g.input("i", (2,), "int64")
        m = g.input("m", (3,), "bool")
        with pytest.raises(mdsl.GraphError, match=message):
            index(x, i, m)
        g.output(x, "x")
