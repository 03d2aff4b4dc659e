"""Building, printing, folding and comparing scalar expressions (`mdsl.expr`)."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import expr as E

x, y, c = E.var("x"), E.var("y"), E.var("c")


@pytest.mark.parametrize(
    ("build", "text"),
    [
        (lambda: x + y * 2, "x + y * 2"),
        (lambda: (x + y) * 2, "(x + y) * 2"),
        (lambda: x - (y - 1), "x - (y - 1)"),
        (lambda: (x - y) - 1, "x - y - 1"),
        (lambda: x / (y * 2), "x / (y * 2)"),
        (lambda: -(x**2), "-x ** 2"),
        (lambda: (-x) ** 2, "(-x) ** 2"),
        (lambda: x ** (y**2), "x ** y ** 2"),
        (lambda: (x**y) ** 2, "(x ** y) ** 2"),
        (lambda: 2 ** (-x), "2 ** (-x)"),
        (lambda: x * -2, "x * -2"),
        (lambda: x % 3, "x % 3"),
        (lambda: (x > 0) & (y <= 1), "(x > 0) & (y <= 1)"),
        (lambda: ~(x == y) | (x != 1), "~(x == y) | (x != 1)"),
        (lambda: (x < y) < c, "(x < y) < c"),
        (lambda: E.select(x >= 0, x, 0.01 * x), "select(x >= 0, x, 0.01 * x)"),
        (lambda: E.max(E.min(x, 6.0), 0), "max(min(x, 6.0), 0)"),
        (lambda: E.cast(x + 1, "float16"), 'cast(x + 1, "float16")'),
        (lambda: E.rsqrt(abs(x)) + E.erf(E.sigmoid(y)), "rsqrt(abs(x)) + erf(sigmoid(y))"),
        (lambda: E.fmod(x, 2.5), "fmod(x, 2.5)"),
    ],
)
def test_printing_uses_only_the_parentheses_python_needs(build, text):
    e = build()
    assert str(e) == text
    assert repr(e) == f"Expr({text!r})"


ROUND_TRIP = [
    x * E.sigmoid(1.702 * x),
    -(x**2) + (-x) ** 3 - x ** (y - 1),
    E.select((x > 0) & ~(y < 0), x / y, E.pow(2.0, -x)),
    (x - y) - (x - (y - c)),
    E.cast(E.max(x, 0) % 3, "int32") * 2,
    E.tanh(0.7978845608 * (x + 0.044715 * x**3)),
]


@pytest.mark.parametrize("e", ROUND_TRIP, ids=str)
def test_printed_text_parses_back_to_the_same_expression(e):
    namespace = {n: getattr(E, n) for n in E.__all__} | {"x": x, "y": y, "c": c}
    again = eval(str(e), namespace)  # the printed form is valid Python over mdsl.expr
    assert E.same(again, e)


def test_constants_fold_but_variables_do_not():
    assert E.same(E.const(2) * 3 + 1, E.const(7))
    assert (E.const(2.0) ** 0.5).value == pytest.approx(2**0.5)
    assert E.exp(0.0).op == "const" and E.exp(0.0).value == 1.0
    assert (E.const(1.0) < 2).value is True
    folded = x * (E.const(3) - 1)
    assert str(folded) == "x * 2"
    assert (x + 1).op == "add"


def test_integer_division_truncates_toward_zero_like_c():
    assert (E.const(7) / 2).value == 3
    assert (E.const(-7) / 2).value == -3  # Python's -7 // 2 is -4
    assert (E.const(7.0) / 2).value == 3.5
    assert (E.const(-7) % 3).value == 2 and E.fmod(-7, 3).value == -1


def test_cast_of_a_constant_keeps_its_dtype_as_a_node():
    e = E.cast(1.5, "float16")
    assert e.op == "cast" and e.value == mdsl.float16 and e.args[0].value == 1.5


def test_expressions_are_immutable_dag_nodes():
    e = x + 1
    with pytest.raises(AttributeError):
        e.op = "sub"
    assert e.args[0] is x and e.args[1].op == "const"
    assert type(e).__slots__  # slotted dataclass: no per-node __dict__
    assert not hasattr(e, "__dict__")


def test_equality_builds_expressions_and_hashing_is_by_identity():
    eq, ne = x == y, x != y
    assert (eq.op, ne.op) == ("eq", "ne")
    a, b = x + 1, x + 1
    assert len({a, b, a}) == 2  # sets and dicts never call == on expressions
    assert {a: 1, b: 2}[a] == 1
    assert E.same(a, b) and not E.same(a, x + 2)
    assert not E.same(E.const(1), E.const(1.0)) and not E.same(E.const(0.0), E.const(-0.0))
    assert E.same(E.const(float("nan")), E.const(float("nan")))


def test_an_expression_has_no_truth_value():
    with pytest.raises(mdsl.GraphError, match="select"):
        if x > 0:
            pass
    with pytest.raises(mdsl.GraphError, match="no truth value"):
        bool(x == y)


def test_numpy_scalars_on_the_left_defer_to_the_expression():
    e = np.float32(2.0) * x
    assert isinstance(e, E.Expr) and str(e) == "2.0 * x"
    assert str(np.int64(3) + x) == "3 + x"


def test_walk_visits_shared_nodes_once_and_after_their_arguments():
    s = x * y
    e = s + E.exp(s)
    order = E.walk(e)
    assert [n.op for n in order].count("mul") == 1
    position = {id(n): i for i, n in enumerate(order)}
    for n in order:
        assert all(position[id(a)] < position[id(n)] for a in n.args)
    assert E.variables(e) == ("x", "y")
    assert E.variables(y * x + y) == ("y", "x")


def test_deep_and_heavily_shared_expressions_stay_cheap():
    deep = x
    for _ in range(5000):
        deep = deep + 1.0
    assert len(E.walk(deep)) == 10001  # iterative: no recursion limit
    doubled = x
    for _ in range(60):
        doubled = doubled + doubled  # 2**60 leaves when printed naively
    assert len(E.walk(doubled)) == 61
    assert len(str(doubled)) < 20000
    got = E.evaluate(doubled, {"x": np.float64(1.0)})
    assert got == 2.0**60


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: E.var("not a name"), mdsl.GraphError, "identifier"),
        (lambda: E.var(3), mdsl.GraphError, "identifier"),
        (lambda: x + "one", mdsl.GraphError, "bool, int or float"),
        (lambda: x * np.ones(3), mdsl.GraphError, "bool, int or float"),
        (lambda: E.const([1, 2]), mdsl.GraphError, "list"),
        (lambda: E.cast(x, "float8"), mdsl.DTypeError, "float8"),
        (lambda: E.apply("frobnicate", x), mdsl.GraphError, "unknown expression op"),
        (lambda: E.apply("add", x), mdsl.GraphError, "takes 2 arguments"),
        (lambda: x // 2, mdsl.GraphError, "floor"),
    ],
)
def test_misuse_raises_a_clear_mdsl_error(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_op_table_describes_every_op_the_numpy_table_implements():
    computed = {op for op, info in E.OPS.items() if info.arity}
    assert computed == set(E.NUMPY_OPS)
    assert E.OPS["lt"].result == "bool" and E.OPS["add"].result == "promote"
    assert E.OPS["cast"].result == "cast" and E.OPS["select"].arity == 3
    assert E.OPS["mul"].symbol == "*" and E.OPS["exp"].symbol is None
