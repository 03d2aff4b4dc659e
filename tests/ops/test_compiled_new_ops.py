"""The op-table cases of the ops with C loops of their own (LSTM, GRU, RNN, GatherND,
ScatterND) compiled by the C backend: equal to the interpreter, run as "custom C op"
kernels (not Python callbacks), and bad indices a clear ExecutionError."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.ops import cases_conv_transpose, cases_indexing_nd, cases_recurrent, op_table

CASES = [c for c in cases_recurrent.CASES + cases_indexing_nd.CASES if c.raises is None]


@pytest.mark.parametrize("case", CASES, ids=[c.name() for c in CASES])
def test_c_backend_equals_interpreter(case):
    g = op_table.build_graph(case)
    want = mdsl.interpret(g, case.inputs)
    exe = mdsl.compile(g, backend="c")
    got = exe(**case.inputs)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6)
    op_kernels = {k.kind for k in exe.kernels if any(case.op in n for n in k.nodes)}
    assert op_kernels == {"custom C op"}


@pytest.mark.parametrize("backend", ["interpreter", "c"])
@pytest.mark.parametrize("op", ["GatherND", "ScatterND"])
def test_out_of_range_index_is_an_execution_error(op, backend):
    with mdsl.Graph() as g:
        x, i = g.input("x", (4, 3)), g.input("i", (2, 1), "int64")
        if op == "GatherND":
            y = ops.gather_nd(x, i)
        else:
            y = ops.scatter_nd(x, i, g.input("u", (2, 3)))
        g.output(y, "y")
    feeds = {"x": np.zeros((4, 3), np.float32), "i": np.array([[1], [4]])}
    if op == "ScatterND":
        feeds["u"] = np.ones((2, 3), np.float32)
    run = (
        (lambda: mdsl.interpret(g, feeds))
        if backend == "interpreter"
        else (lambda: mdsl.compile(g, backend="c")(**feeds))
    )
    with pytest.raises(mdsl.ExecutionError, match=op):
        run()


CONV_TRANSPOSE_CASES = [c for c in cases_conv_transpose.CASES if c.raises is None]


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES, ids=[c.name() for c in CONV_TRANSPOSE_CASES])
def test_conv_transpose_compiles_as_a_conv_or_matmul(case):
    """The optimizer rewrites float32 ConvTranspose (passes.conv_transpose); others run
    their Python binding."""
    g = op_table.build_graph(case)
    want = mdsl.interpret(g, case.inputs)
    exe = mdsl.compile(g, backend="c")
    got = exe(**case.inputs)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)
    float32 = all(a.dtype == np.float32 for a in case.inputs.values())
    assert bool(exe.plan.fallbacks) == (not float32)


@pytest.mark.parametrize("backend", ["interpreter", "c"])
def test_a_sequence_length_beyond_the_steps_is_an_execution_error(backend):
    with mdsl.Graph() as g:
        x, n = g.input("x", (4, 2)), g.input("n", (2,), "int64")
        g.output(ops.reverse_sequence(x, n), "y")
    feeds = {"x": np.zeros((4, 2), np.float32), "n": np.array([2, 5])}
    run = (lambda: mdsl.interpret(g, feeds)) if backend == "interpreter" else (
        lambda: mdsl.compile(g, backend="c")(**feeds))  # fmt: skip
    with pytest.raises(mdsl.ExecutionError, match="ReverseSequence"):
        run()
