"""Feed validation: every way a feed can be wrong gets an ExecutionError saying where."""

from __future__ import annotations

import types

import numpy as np
import pytest

import mdsl
from mdsl.runtime.feeds import bind_feeds
from mdsl.targets.feeds import FeedMatcher

F32 = np.float32


def _graph(*inputs):
    """A graph summing its (name, shape, dtype) inputs' totals into one output."""
    with mdsl.Graph("feeds") as g:
        tensors = [g.input(name, shape, dtype) for name, shape, dtype in inputs]
        total = tensors[0].sum()
        for t in tensors[1:]:
            total = total + t.astype(tensors[0].dtype).sum()
        g.output(total, "y")
    return g


def _zeros(*shape, dtype=F32):
    return np.zeros(shape, dtype)


N, M = mdsl.Dim("N"), mdsl.Dim("M")


def test_good_feeds_bind_every_symbol():
    g = _graph(("x", (N, 3), "float32"), ("y", (M, N), "float32"))
    env, symbols = bind_feeds(g, {"x": _zeros(4, 3), "y": _zeros(2, 4)})
    assert symbols == {"N": 4, "M": 2}
    assert set(env) == {"x", "y"}
    assert mdsl.interpret(g, {"x": np.ones((4, 3), F32), "y": np.ones((2, 4), F32)})["y"] == 20


@pytest.mark.parametrize(
    ("feeds", "match"),
    [
        ([("x", _zeros(2))], "feeds must be a mapping of input name to array, got list"),
        ({}, "graph 'feeds' feeds: missing x, z"),
        (
            {"x": _zeros(2), "z": _zeros(2), "w": _zeros(1)},
            r"unknown 'w' \(inputs: x, z\)",
        ),
        ({"x": _zeros(2), "w": 1}, r"missing z; unknown 'w'"),
    ],
)
def test_names_must_match_the_declared_inputs(feeds, match):
    g = _graph(("x", (2,), "float32"), ("z", (2,), "float32"))
    with pytest.raises(mdsl.ExecutionError, match=match):
        mdsl.interpret(g, feeds)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.zeros(3, np.float64), r"input 'x': dtype float64, declared float32.*astype"),
        (np.zeros(3, np.int32), "dtype int32, declared float32"),
        ("abc", "expected a numpy array, got str"),
        ({"a": 1}, "expected a numpy array, got dict"),
        (np.zeros((3, 1), F32), r"rank 2 \(shape \[3, 1\]\), declared rank 1 \(float32\[3\]\)"),
        (np.zeros(4, F32), "input 'x' dim 0: size 4, declared 3"),
        ([[1.0, 2.0], [3.0]], "not a rectangular array"),
        (["a", "b", "c"], "str.* cannot be fed as float32"),
    ],
)
def test_bad_arrays_for_a_float_input(value, match):
    g = _graph(("x", (3,), "float32"))
    with pytest.raises(mdsl.ExecutionError, match=match):
        mdsl.interpret(g, {"x": value})


def test_python_scalars_and_lists_convert_when_nothing_is_lost():
    g = _graph(("x", (3,), "float32"), ("i", (), "int8"))
    out = mdsl.interpret(g, {"x": [1, 2, 3.5], "i": 7})
    assert out["y"] == pytest.approx(13.5)
    with pytest.raises(mdsl.ExecutionError, match="float64 values cannot be fed as int8"):
        mdsl.interpret(g, {"x": [1, 2, 3], "i": 1.5})
    with pytest.raises(mdsl.ExecutionError, match="values do not fit in int8"):
        mdsl.interpret(g, {"x": [1, 2, 3], "i": 300})
    with pytest.raises(mdsl.ExecutionError, match=r"rank 2 \(shape \[1, 1\]\), declared rank 0"):
        mdsl.interpret(g, {"x": [1, 2, 3], "i": [[1]]})
    with pytest.raises(mdsl.ExecutionError, match="input 'i': dtype int16, declared int8"):
        mdsl.interpret(g, {"x": [1, 2, 3], "i": np.int16(3)})  # numpy scalars are typed


def test_a_symbol_is_bound_to_one_size_per_run():
    g = _graph(("x", (N, 3), "float32"), ("y", (N,), "float32"))
    with pytest.raises(
        mdsl.ExecutionError,
        match=r"input 'y' dim 0: N = 5, but input 'x' dim 0 bound N = 4",
    ):
        mdsl.interpret(g, {"x": _zeros(4, 3), "y": _zeros(5)})
    square = _graph(("x", (N, N), "float32"))
    with pytest.raises(mdsl.ExecutionError, match="dim 1: N = 3, but input 'x' dim 0 bound N = 2"):
        mdsl.interpret(square, {"x": _zeros(2, 3)})
    # another run may bind N differently
    assert mdsl.interpret(g, {"x": _zeros(2, 3), "y": _zeros(2)})["y"] == 0


def test_dim_ranges_are_checked_and_the_tightest_declaration_wins():
    lo_hi = mdsl.Dim("B", min=2, max=8)
    g = _graph(("x", (lo_hi,), "float32"), ("y", (mdsl.Dim("B", max=4),), "float32"))
    with pytest.raises(mdsl.ExecutionError, match=r"input 'x' dim 0: B = 1 is outside .*\[2, 4\]"):
        mdsl.interpret(g, {"x": _zeros(1), "y": _zeros(1)})
    with pytest.raises(mdsl.ExecutionError, match=r"B = 6 is outside its range \[2, 4\]"):
        mdsl.interpret(g, {"x": _zeros(6), "y": _zeros(6)})
    unbounded = _graph(("x", (mdsl.Dim("B", min=3),), "float32"))
    with pytest.raises(mdsl.ExecutionError, match=r"\[3, inf\]"):
        mdsl.interpret(unbounded, {"x": _zeros(2)})
    assert mdsl.interpret(g, {"x": _zeros(3), "y": _zeros(3)})["y"] == 0


def test_expression_dims_are_checked_once_their_symbols_are_bound():
    g = _graph(("x", (N, 2 * N), "float32"), ("y", ((N + 1) // 2,), "float32"))
    assert bind_feeds(g, {"x": _zeros(5, 10), "y": _zeros(3)})[1] == {"N": 5}
    with pytest.raises(
        mdsl.ExecutionError,
        match=r"input 'x' dim 1: size 9, declared 2\*N = 10 \(N = 5 from input 'x' dim 0\)",
    ):
        mdsl.interpret(g, {"x": _zeros(5, 9), "y": _zeros(3)})
    with pytest.raises(mdsl.ExecutionError, match=r"input 'y' dim 0: size 2, declared"):
        mdsl.interpret(g, {"x": _zeros(5, 10), "y": _zeros(2)})


def test_a_lone_symbol_is_solved_from_an_expression_dim():
    g = _graph(("x", (2 * N + 1,), "float32"))
    assert bind_feeds(g, {"x": _zeros(7)})[1] == {"N": 3}
    with pytest.raises(mdsl.ExecutionError, match=r"size 6 fits 2\*N\+1 for no size of N"):
        mdsl.interpret(g, {"x": _zeros(6)})
    chained = _graph(("x", (N + M,), "float32"), ("y", (2 * M,), "float32"))
    assert bind_feeds(chained, {"x": _zeros(5), "y": _zeros(4)})[1] == {"M": 2, "N": 3}
    with pytest.raises(mdsl.ExecutionError, match="fits M\\+N for no size of N"):
        mdsl.interpret(chained, {"x": _zeros(1), "y": _zeros(4)})  # N would be -1


def test_expression_dims_that_cannot_be_solved_say_so():
    product = _graph(("x", (N * M,), "float32"))
    with pytest.raises(mdsl.ExecutionError, match=r"cannot tell M, N from the size of M\*N"):
        mdsl.interpret(product, {"x": _zeros(6)})
    square = _graph(("x", (N * N,), "float32"))
    with pytest.raises(mdsl.ExecutionError, match=r"cannot solve N\*N = 9 for N"):
        mdsl.interpret(square, {"x": _zeros(9)})


def test_symbols_bound_by_feeds_size_the_intermediate_tensors():
    with mdsl.Graph() as g:
        x = g.input("x", (N, 3))
        g.output(x.reshape(-1), "flat")
    assert mdsl.interpret(g, {"x": np.ones((4, 3), F32)})["flat"].shape == (12,)


# -- FeedMatcher: bind_feeds worked out ahead, for the feeds most calls pass ----------------------
def _matcher_cases():
    ranged = mdsl.Dim("N", min=2, max=6)
    symbolic = _graph(("x", (ranged, 3), "float32"), ("y", ("M", "N"), "int32"))
    good = {"x": _zeros(4, 3), "y": _zeros(5, 4, dtype=np.int32)}
    static = _graph(("x", (2, 3), "float32"))
    expression = _graph(("x", (2 * N,), "float32"))
    strided = np.zeros((4, 6), F32)[:, ::2]
    return {
        "symbolic good": (symbolic, good, True),
        "symbolic empty M": (symbolic, {**good, "y": _zeros(0, 4, dtype=np.int32)}, True),
        "symbolic strided": (symbolic, {**good, "x": strided}, True),
        "N disagrees": (symbolic, {**good, "y": _zeros(5, 3, dtype=np.int32)}, False),
        "N below min": (symbolic, {"x": _zeros(1, 3), "y": _zeros(5, 1, dtype=np.int32)}, False),
        "N above max": (symbolic, {"x": _zeros(7, 3), "y": _zeros(5, 7, dtype=np.int32)}, False),
        "static dim": (symbolic, {**good, "x": _zeros(4, 2)}, False),
        "rank": (symbolic, {**good, "x": _zeros(4, 3, 1)}, False),
        "dtype": (symbolic, {**good, "y": _zeros(5, 4, dtype=np.int64)}, False),
        "missing": (symbolic, {"x": good["x"]}, False),
        "extra": (symbolic, {**good, "z": good["x"]}, False),
        "list": (symbolic, {**good, "x": [[0.0] * 3] * 4}, False),
        "mapping": (symbolic, types.MappingProxyType(good), False),
        "static good": (static, {"x": _zeros(2, 3)}, True),
        "static transposed": (static, {"x": _zeros(3, 2)}, False),
        "static big-endian": (static, {"x": _zeros(2, 3).astype(">f4")}, False),
        "expression": (expression, {"x": _zeros(4)}, False),
    }


def test_the_feed_matcher_accepts_exactly_what_bind_feeds_takes_as_it_is():
    accepted = set()
    for name, (g, feeds, _) in _matcher_cases().items():
        symbols = FeedMatcher(g).symbols(feeds)
        if symbols is None:
            continue  # bind_feeds decides: converts, solves, or raises
        accepted.add(name)
        env, want = bind_feeds(g, feeds)
        assert symbols == want, name
        assert all(env[k] is feeds[k] for k in feeds), name
    assert accepted == {n for n, (_, _, ok) in _matcher_cases().items() if ok}
