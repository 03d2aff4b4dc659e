"""Symbolic dims (`mdsl/ir/dim.py`): canonical forms, evaluation, ranges, JSON."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdsl
from mdsl.ir.dim import MAX_DIM, Dim, as_dim, dim_from_json, dims_equal, is_static

N, H, W = Dim("N"), Dim("H"), Dim("W")


# -- canonical forms ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (lambda: N * H + N, "H*N+N"),
        (lambda: N + 1, "N+1"),
        (lambda: 1 + N, "N+1"),
        (lambda: N - 1, "N-1"),
        (lambda: 1 - N, "-N+1"),
        (lambda: -N, "-N"),
        (lambda: 2 * N * H, "2*H*N"),
        (lambda: (2 * N + 4) // 2, "N+2"),
        (lambda: (N + 1) // 2, "(N+1)//2"),
        (lambda: (N * H) // 4, "H*N//4"),
        (lambda: (N + 1) % 2, "(N+1)%2"),
        (lambda: N * N, "N*N"),
    ],
)
def test_expressions_print_canonically(expr, text):
    assert str(expr()) == text


def test_equality_after_simplification():
    assert (N + 1) - 1 == N
    assert N * H == H * N
    assert (N + H) * 2 == 2 * H + 2 * N
    assert (N + 1) * (N - 1) == N * N - 1
    assert (4 * N) // 4 == N
    assert (N * H * 6) // 3 == 2 * H * N
    assert (N + 1) // 2 == (1 + N) // 2
    assert hash((N + 1) // 2) == hash((1 + N) // 2)
    assert N + 1 != N
    assert N != H


def test_expressions_that_cancel_become_plain_ints():
    for value, want in [(N - N, 0), ((N + 3) - N, 3), (N * 0, 0), (N // N, 1), ((2 * N) % 2, 0)]:
        assert value == want
        assert type(value) is int


def test_a_dim_never_equals_an_int():
    assert N != 1
    assert Dim("N") == N  # same symbol, new object
    assert dims_equal(N, Dim("N")) and dims_equal(3, 3)
    assert not dims_equal(N, 3) and not dims_equal(3, 4)


def test_name_and_free_symbols():
    assert N.name == "N"
    assert (N + 1).name is None and (2 * N).name is None
    assert ((N * H + 1) // 2 + W).free_symbols == {"N", "H", "W"}


def test_evaluate_binds_every_symbol():
    expr = (N * H + 3) // 2 - W % 4
    assert expr.evaluate({"N": 3, "H": 5, "W": 7}) == (3 * 5 + 3) // 2 - 7 % 4
    with pytest.raises(mdsl.ShapeError, match="symbolic dim W has no value bound"):
        expr.evaluate({"N": 3, "H": 5})


# -- refused operations -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda: N // H, "cannot divide N by the symbolic H"),
        (lambda: N // 0, "cannot divide N by 0"),
        (lambda: N // -2, "cannot divide N by -2"),
        (lambda: N % H, "cannot take N modulo H"),
        (lambda: N % 0, "cannot take N modulo 0"),
        (lambda: 6 // N, "cannot divide 6 by the symbolic N"),
        (lambda: 6 % N, "cannot take 6 modulo the symbolic N"),
        (lambda: range(N), "symbolic dim N used where a concrete integer is required"),
    ],
)
def test_refused_operations_raise_shape_error(fn, message):
    with pytest.raises(mdsl.ShapeError, match=message):
        fn()


def test_non_integer_operands_are_not_supported():
    with pytest.raises(TypeError):
        N + 1.5


# -- declaration ------------------------------------------------------------------------------
def test_range_is_kept_on_the_symbol():
    d = mdsl.Dim("N", min=1, max=64)
    assert (d.min, d.max, d.name) == (1, 64, "N")
    assert d == Dim("N")  # ranges do not change identity


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "1N"}, "must be an identifier"),
        ({"name": "a b"}, "must be an identifier"),
        ({"name": 3}, "must be an identifier"),
        ({"name": "N", "min": 4, "max": 2}, r"max \(2\) < min \(4\)"),
        ({"name": "N", "min": -1}, r"min \(-1\) is negative"),
    ],
)
def test_bad_declarations(kwargs, message):
    with pytest.raises(mdsl.ShapeError, match=message):
        Dim(**kwargs)


def test_as_dim_normalizes_and_rejects():
    assert as_dim(3) == 3 and as_dim(np.int64(3)) == 3 and type(as_dim(np.int64(3))) is int
    assert as_dim("N") == N
    assert as_dim(N) is N
    assert as_dim(0) == 0
    assert as_dim(MAX_DIM) == MAX_DIM
    for bad, message in [
        (-1, "negative dim -1"),
        (MAX_DIM + 1, "absurd dim"),
        (2.0, "a dim must be an int, a name or a Dim"),
        (True, "a dim must be an int"),
        (None, "a dim must be an int"),
    ]:
        with pytest.raises(mdsl.ShapeError, match=message):
            as_dim(bad)


def test_is_static():
    assert is_static((1, 2, 3)) and is_static(())
    assert not is_static((1, N))


# -- JSON -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expr",
    [
        lambda: N,
        lambda: N * H + 2 * W - 7,
        lambda: (N + 1) // 2,
        lambda: ((N * H + 1) // 2 + 3) % 5 * W,
        lambda: Dim("N", min=1, max=64),
        lambda: Dim("B", min=2),
    ],
)
def test_json_round_trip(expr):
    d = expr()
    back = dim_from_json(d.to_json())
    assert back == d and str(back) == str(d)
    assert (back.min, back.max) == (d.min, d.max)


@pytest.mark.parametrize(
    "obj",
    [
        "N",
        None,
        1.5,
        True,
        {"terms": "N"},
        {"terms": [["N", 1]]},
        {"terms": [[["N"], 1.5]]},
        {"terms": [[["1N"], 1]]},
        {"terms": [[[3], 1]]},
        {"terms": [[[{"floordiv": 5, "den": 2}], 1]]},
        {"terms": [[[{"floordiv": {"terms": [[["N"], 1]]}, "den": 0}], 1]]},
        {"terms": [[[{"floordiv": {"terms": [[["N"], 1]]}}], 1]]},
        {"terms": [[["N"], 1]], "range": [5, 2]},
        {"terms": [[["N"], 1]], "range": [-1, None]},
        {"terms": [[["N"], 1]], "range": "1..3"},
        {"terms": [[["N"], 1]], "range": [1.0, 3]},
    ],
)
def test_bad_json_raises_shape_error(obj):
    with pytest.raises(mdsl.ShapeError):
        dim_from_json(obj)


# -- property: symbolic arithmetic agrees with integer arithmetic ---------------------------
SYMBOLS = ("A", "B", "C")
_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _expressions():
    leaves = st.one_of(
        st.sampled_from(SYMBOLS).map(lambda s: ("sym", s)),
        st.integers(-20, 20).map(lambda k: ("int", k)),
    )

    def extend(children):
        return st.one_of(
            st.tuples(st.sampled_from(sorted(_BINARY)), children, children),
            st.tuples(st.sampled_from(["//", "%"]), children, st.integers(1, 7)),
            st.tuples(st.just("neg"), children),
        )

    return st.recursive(leaves, extend, max_leaves=12)


def _build(tree, leaf):
    """Evaluate an expression tree; `leaf` turns a symbol name into a Dim or an int."""
    kind = tree[0]
    if kind == "sym":
        return leaf(tree[1])
    if kind == "int":
        return tree[1]
    if kind == "neg":
        return -_build(tree[1], leaf)
    if kind in ("//", "%"):
        value = _build(tree[1], leaf)
        return value // tree[2] if kind == "//" else value % tree[2]
    return _BINARY[kind](_build(tree[1], leaf), _build(tree[2], leaf))


def _concrete(value, env):
    return value.evaluate(env) if isinstance(value, Dim) else value


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    _expressions(),
    st.fixed_dictionaries({s: st.integers(-50, 50) for s in SYMBOLS}),
)
def test_symbolic_evaluation_equals_integer_arithmetic(tree, env):
    symbolic = _build(tree, Dim)
    plain = _build(tree, env.__getitem__)
    assert _concrete(symbolic, env) == plain
    # the canonical form survives JSON, so a saved graph keeps the same expressions
    if isinstance(symbolic, Dim):
        assert dim_from_json(symbolic.to_json()) == symbolic


@settings(max_examples=200, derandomize=True, deadline=None)
@given(_expressions(), _expressions(), st.lists(st.integers(-9, 9), min_size=3, max_size=3))
def test_equal_expressions_evaluate_equal(tree_a, tree_b, values):
    """Structural equality is sound: equal canonical forms are equal functions."""
    env = dict(zip(SYMBOLS, values))
    a, b = _build(tree_a, Dim), _build(tree_b, Dim)
    if isinstance(a, Dim) and a == b:
        assert hash(a) == hash(b)
        assert _concrete(a, env) == _concrete(b, env)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(_expressions())
def test_commuted_sums_and_products_compare_equal(tree):
    x = _build(tree, Dim)
    assert x + Dim("A") == Dim("A") + x
    assert x * Dim("B") == Dim("B") * x
    assert (x + 5) - 5 == x
