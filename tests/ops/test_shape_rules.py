"""Shape rules (`mdsl/ops/shape_rules.py`): broadcasting checked against numpy, and symbolic
dims carried through ops (checked against the shapes numpy produces when the graph runs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdsl
from mdsl import ops
from mdsl.ir.dim import Dim
from mdsl.ops.shape_rules import (
    broadcast_shapes,
    divide_exactly,
    normalize_axes,
    normalize_axis,
)

N, H = Dim("N"), Dim("H")
PROPERTY = settings(max_examples=200, derandomize=True, deadline=None)

# small dims, 0 and 1 included, so that mismatches and stretching are both common
DIMS = st.integers(0, 4)
SHAPES = st.lists(DIMS, min_size=0, max_size=4).map(tuple)


# -- broadcasting against numpy -------------------------------------------------------------------
@PROPERTY
@given(st.lists(SHAPES, min_size=0, max_size=4))
def test_broadcast_shapes_agrees_with_numpy(shapes):
    try:
        want = np.broadcast_shapes(*shapes)
    except ValueError:
        with pytest.raises(mdsl.ShapeError, match="cannot broadcast"):
            broadcast_shapes(*shapes)
        return
    got = broadcast_shapes(*shapes)
    assert got == want and all(type(d) is int for d in got)


@settings(max_examples=120, derandomize=True, deadline=None)
@given(SHAPES, SHAPES)
def test_add_in_a_graph_broadcasts_like_numpy(shape_a, shape_b):
    try:
        want = np.broadcast_shapes(shape_a, shape_b)
    except ValueError:
        want = None
    with mdsl.Graph() as g:
        a, b = g.input("a", shape_a), g.input("b", shape_b)
        if want is None:
            with pytest.raises(mdsl.ShapeError) as e:
                a + b
            assert (e.value.node, e.value.op_type) == ("Add", "Add")
            g.output(a, "y")
            return
        y = a + b
        g.output(y, "y")
    assert y.shape == want
    rng = np.random.default_rng(0)
    feeds = {
        "a": rng.standard_normal(shape_a).astype(np.float32),
        "b": rng.standard_normal(shape_b).astype(np.float32),
    }
    out = mdsl.interpret(g, feeds)["y"]
    np.testing.assert_array_equal(out, feeds["a"] + feeds["b"])


SYMBOLS = ("N", "M")
SYMBOLIC_SHAPES = st.lists(st.one_of(DIMS, st.sampled_from(SYMBOLS)), max_size=4).map(tuple)


@PROPERTY
@given(
    st.lists(SYMBOLIC_SHAPES, min_size=1, max_size=3),
    st.fixed_dictionaries({s: st.integers(0, 4) for s in SYMBOLS}),
)
def test_symbolic_broadcast_agrees_with_numpy_on_every_binding(shapes, env):
    """Where mdsl accepts symbolic shapes and numpy accepts the bound ones, they agree."""
    try:
        symbolic = broadcast_shapes(*shapes)
    except mdsl.ShapeError:
        return
    concrete = [tuple(env[d] if isinstance(d, str) else d for d in s) for s in shapes]
    try:
        want = np.broadcast_shapes(*concrete)
    except ValueError:
        return  # a binding the runtime refuses (N=3 against 4)
    assert tuple(d.evaluate(env) if isinstance(d, Dim) else d for d in symbolic) == want


def test_symbolic_broadcast_rules():
    assert broadcast_shapes(("N", 1), (1, 8)) == (N, 8)
    assert broadcast_shapes(("N", 4), (3, 1, 4)) == (3, N, 4)
    assert broadcast_shapes(("N",), ("N",)) == (N,)
    assert broadcast_shapes(("N",), (5,)) == (5,)  # the runtime checks N is 5 or 1
    assert broadcast_shapes((N * H,), (H * N,)) == (N * H,)
    assert broadcast_shapes() == ()
    with pytest.raises(mdsl.ShapeError, match=r"shapes \(N, 4\) and \(M, 4\) cannot broadcast"):
        broadcast_shapes(("N", 4), ("M", 4))


# -- symbolic dims through ops --------------------------------------------------------------------
def _run_shapes(g, **sizes):
    """Interpret `g` with random feeds for the given symbol sizes; output name -> shape."""
    rng = np.random.default_rng(1)
    feeds = {}
    for name, t in g.inputs.items():
        shape = tuple(d.evaluate(sizes) if isinstance(d, Dim) else d for d in t.shape)
        feeds[name] = rng.standard_normal(shape).astype(t.dtype.np)
    return {k: v.shape for k, v in mdsl.interpret(g, feeds).items()}


def _evaluate(shape, **sizes):
    return tuple(d.evaluate(sizes) if isinstance(d, Dim) else d for d in shape)


def test_product_of_symbols_through_reshape_and_flatten():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", "H", 4))
        flat = ops.reshape(x, shape=(-1, 4))
        whole = ops.flatten(x, axis=2)
        with pytest.raises(mdsl.ShapeError, match="not divisible"):
            ops.reshape(flat, shape=(-1, 3, 4))  # 4*N*H / 12 is not exact
        g.output(flat, "flat")
        g.output(whole, "whole")
    assert flat.shape == (N * H, 4) and str(flat.shape[0]) == "H*N"
    assert whole.shape == (N * H, 4)
    for sizes in ({"N": 3, "H": 5}, {"N": 1, "H": 7}):
        shapes = _run_shapes(g, **sizes)
        for name in ("flat", "whole"):
            assert shapes[name] == _evaluate(g.outputs[name].shape, **sizes)


def test_reshape_to_a_symbolic_target():
    with mdsl.Graph() as g:
        flat = ops.reshape(g.input("x", ("N", "H", 4)), shape=(-1, 4))
        back = ops.reshape(flat, shape=(N, H, 2, 2))
        g.output(back, "y")
        with pytest.raises(mdsl.ShapeError, match="cannot reshape"):
            ops.reshape(flat, shape=(N, N, 4))
    assert back.shape == (N, H, 2, 2)
    mdsl.ir.verify(mdsl.Graph.from_json(g.to_json()))


def test_sums_and_differences_through_concat_and_slice():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 4))
        grown = ops.concat([x, g.input("row", (1, 4))], axis=0)
        shrunk = x[1:]
        both = ops.concat([shrunk, x[:1]], axis=0)  # N - 1 + 1 simplifies to N
        g.output(grown, "grown")
        g.output(shrunk, "shrunk")
        g.output(both + x, "same")  # broadcasting sees two equal dims
    assert grown.shape == (N + 1, 4) and str(grown.shape[0]) == "N+1"
    assert shrunk.shape == (N - 1, 4)
    assert both.shape == (N, 4) and both.shape[0] == N
    assert g.outputs["same"].shape == (N, 4)
    for n in (2, 9):
        shapes = _run_shapes(g, N=n)
        assert shapes == {"grown": (n + 1, 4), "shrunk": (n - 1, 4), "same": (n, 4)}


@pytest.mark.parametrize("step", [2, 3])
def test_floor_division_through_strided_slices(step):
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 2))
        y = x[::step]
        g.output(y, "y")
    assert str(y.shape[0]) == f"(N+{step - 1})//{step}"
    for n in range(1, 8):
        assert _run_shapes(g, N=n)["y"] == (len(range(0, n, step)), 2)


def test_equality_after_simplification_lets_differently_built_shapes_meet():
    with mdsl.Graph() as g:
        a = ops.reshape(g.input("a", ("N", "H")), shape=(-1,))  # N*H
        b = ops.reshape(g.input("b", ("H", "N")), shape=(-1,))  # H*N
        c = ops.reshape(g.input("c", ("N", "H", 2)), shape=(-1, 2))[:, 0]  # N*H
        g.output(a + b + c, "y")
    assert g.outputs["y"].shape == (N * H,)
    assert _run_shapes(g, N=3, H=4)["y"] == (12,)


def test_two_different_symbols_do_not_broadcast_in_a_graph():
    with mdsl.Graph() as g:
        a, b = g.input("a", ("N",)), g.input("b", ("M",))
        with pytest.raises(mdsl.ShapeError, match="N vs M"):
            a + b
        g.output(a, "y")


def test_matmul_carries_symbolic_batch_and_checks_symbolic_k():
    with mdsl.Graph() as g:
        x = g.input("x", ("B", "S", "D"))
        w = g.input("w", ("D", 8))
        y = x @ w
        with pytest.raises(mdsl.ShapeError, match=r"K of a \(D\) != K of b \(S\)"):
            x @ x
        g.output(y, "y")
    assert y.shape == (Dim("B"), Dim("S"), 8)


def test_dim_with_a_range_is_declared_carried_and_checked_at_run_time():
    n = mdsl.Dim("N", min=1, max=64)
    with mdsl.Graph() as g:
        x = g.input("x", (n, 3))
        y = ops.relu(x) * 2.0
        g.output(y, "y")
    declared = g.inputs["x"].shape[0]
    assert (declared.min, declared.max) == (1, 64)
    assert y.shape == (n, 3)
    assert mdsl.interpret(g, {"x": np.ones((64, 3), np.float32)})["y"].shape == (64, 3)
    for bad in (0, 65):
        with pytest.raises(mdsl.ExecutionError, match=r"N = \d+ is outside its range \[1, 64\]"):
            mdsl.interpret(g, {"x": np.ones((bad, 3), np.float32)})


# -- small helpers ---------------------------------------------------------------------------------
def test_normalize_axis_and_axes():
    assert normalize_axis(-1, 3) == 2 and normalize_axis(0, 3) == 0
    assert normalize_axis(0, 0) == 0  # a scalar's only axis for keepdims-style ops
    assert normalize_axes((0, -1), 3) == (0, 2)
    with pytest.raises(mdsl.ShapeError, match="axis 3 is out of range for rank 3"):
        normalize_axis(3, 3)
    with pytest.raises(mdsl.ShapeError, match="axis -4 is out of range for rank 3"):
        normalize_axis(-4, 3)
    with pytest.raises(mdsl.ShapeError, match=r"axes \(0, -3\) repeat an axis"):
        normalize_axes((0, -3), 3)


@pytest.mark.parametrize(
    ("total", "part", "want"),
    [
        (12, 4, 3),
        (N * 4, 4, N),
        (N * H * 6, N * 3, 2 * H),
        (N * H + N, N, H + 1),
    ],
)
def test_divide_exactly(total, part, want):
    assert divide_exactly(total, part, "reshape") == want


@pytest.mark.parametrize(
    ("total", "part"),
    [(12, 5), (12, 0), (N + 1, 2), (N * 4, H), (6, N), (N, N + 1), (N * 4, N * 3)],
)
def test_divide_exactly_refuses_inexact_quotients(total, part):
    with pytest.raises(mdsl.ShapeError, match="reshape"):
        divide_exactly(total, part, "reshape")
