"""Generated indexing kernels (`kir.Indexed` in C): they replace the Python callbacks,
and a bad index stops the run with an error naming the node, the axis and its size
(the interpreter raises for the same feeds). Results against the interpreter: the op
table (`tests/ops/cases_indexed_kernels.py`, run on C by tests/runtime/test_c_backend.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops


def _graph():
    with mdsl.Graph("indexed") as g:
        table = g.input("table", (5, 3))
        ids = g.input("ids", (4,), "int64")
        pos = g.input("pos", (2, 3), "int64")
        g.output(ops.gather(table, ids), "rows")
        g.output(ops.gather_elements(table, pos, axis=0), "picked")
        g.output(ops.scatter_elements(table, pos, g.input("u", (2, 3)), axis=0), "written")
        g.output(ops.cumsum(table, 1), "scan")
        g.output(ops.cumprod(table, 0, exclusive=True, reverse=True), "products")
        g.output(ops.topk(table, 2, axis=0)[1], "top")
        g.output(ops.argmax(table, axis=1), "best")
        g.output(ops.pad(table, [1, 1, 1, 1], mode="reflect"), "padded")
    return g


def _feeds(ids=(0, -5, 4, 2), pos=((0, 4, -1), (3, 3, 0))):
    rng = np.random.default_rng(0)
    return {
        "table": rng.standard_normal((5, 3)).astype(np.float32),
        "ids": np.array(ids, np.int64),
        "pos": np.array(pos, np.int64),
        "u": rng.standard_normal((2, 3)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def exe():
    return mdsl.compile(_graph(), backend="c")


def test_every_node_is_generated_and_equals_the_interpreter(exe):
    assert exe.plan.fallbacks == []
    assert {k.kind for k in exe.kernels} == {"indexing"}
    feeds = _feeds()
    want = mdsl.interpret(_graph(), feeds)
    got = exe(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize(
    ("feeds", "op", "detail"),
    [
        (_feeds(ids=(0, 5, 1, 1)), "Gather", "axis 0 of size 5"),
        (_feeds(ids=(0, -6, 1, 1)), "Gather", "axis 0 of size 5"),
        (_feeds(pos=((0, 1, 2), (9, 0, 0))), "GatherElements", "axis 0 of size 5"),
    ],
)
def test_an_index_out_of_range_is_a_clear_error(exe, feeds, op, detail):
    with pytest.raises(mdsl.MdslError) as interpreted:
        mdsl.interpret(_graph(), feeds)
    assert "out of range" in str(interpreted.value)
    with pytest.raises(mdsl.MdslError) as compiled:
        exe(feeds)
    message = str(compiled.value)
    assert f"{op}: an index is out of range for {detail}" in message
    assert f"({op})" in message  # the node


def test_a_bad_scatter_index_fails_the_run_and_the_next_run_works():
    with mdsl.Graph("scatter") as g:
        x, idx = g.input("x", (4, 2)), g.input("idx", (1, 2), "int64")
        g.output(ops.scatter_elements(x, idx, g.input("u", (1, 2)), reduction="add"), "y")
    exe = mdsl.compile(g, backend="c")
    x, u = np.ones((4, 2), np.float32), np.full((1, 2), 2.0, np.float32)
    with pytest.raises(mdsl.MdslError, match="ScatterElements: an index is out of range"):
        exe(x=x, idx=np.array([[0, -7]]), u=u)
    y = exe(x=x, idx=np.array([[3, -4]]), u=u)["y"]
    np.testing.assert_array_equal(y, [[1, 3], [1, 1], [1, 1], [3, 1]])


def test_gather_over_symbolic_dims_needs_no_specialization():
    with mdsl.Graph("embed") as g:
        table = g.input("table", (10, 4))
        g.output(ops.gather(table, g.input("ids", ("B", "T"), "int64")), "y")
    exe = mdsl.compile(g, backend="c")
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    for shape in ((2, 3), (1, 7)):
        ids = np.random.default_rng(1).integers(-10, 10, shape)
        np.testing.assert_array_equal(exe(table=table, ids=ids)["y"], table[ids])
    assert sorted(exe.variants()) == [()]
    assert [k.kind for k in exe.kernels] == ["indexing"]


def test_shape_and_size_over_symbolic_dims_are_generated_from_the_runs_sizes():
    with mdsl.Graph("sizes") as g:
        x = g.input("x", ("N", 3, "H"))
        g.output(ops.shape(x, start=0, end=None), "shape")
        g.output(ops.shape(x, start=-2, end=None), "tail")
        g.output(ops.size(ops.reshape(x * 2.0, shape=(-1,))), "size")
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == []
    for dims in ((4, 3, 5), (1, 3, 2)):
        x = np.zeros(dims, np.float32)
        got, want = exe(x=x), mdsl.interpret(g, {"x": x})
        for name in want:
            assert got[name].dtype == np.int64
            np.testing.assert_array_equal(got[name], want[name])


def test_the_kernel_cases_of_the_op_table_run_without_callbacks():
    from tests.ops.cases_indexed_kernels import CASES
    from tests.runtime.test_c_backend import _batch_feeds, _batch_graph, _case_outputs

    cases = [c for c in CASES if c.raises is None]
    exe = mdsl.compile(_batch_graph(cases), backend="c")
    assert exe.plan.fallbacks == []
    outputs = exe(_batch_feeds(cases))
    from tests.ops.op_table import build_graph

    for i, case in enumerate(cases):
        want = mdsl.interpret(build_graph(case), case.inputs)
        got = _case_outputs(outputs, i)
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=case.name())
