"""Scalar expressions: what an elementwise op computes, written with Python operators.

An implementation bound with `backend="expr"` takes one variable per op input and returns
an expression; the interpreter evaluates it with numpy, and code generators render it per
target (C, numba, AscendC), which is what makes such ops fusable.

>>> import numpy as np, mdsl
>>> x = mdsl.expr.var("x")
>>> gelu = x * mdsl.expr.sigmoid(1.702 * x)
>>> print(gelu)
x * sigmoid(1.702 * x)
>>> mdsl.expr.evaluate(gelu, {"x": np.array([0.0, 1.0], np.float32)})
array([0.       , 0.8457958], dtype=float32)
>>> relu6 = mdsl.expr.min(mdsl.expr.max(x, 0.0), 6.0)
>>> print(mdsl.expr.select(x > 0, x, 0.01 * x), relu6, sep="; ")
select(x > 0, x, 0.01 * x); min(max(x, 0.0), 6.0)

Operators: `+ - * / % **`, unary `-`, comparisons `< <= > >= == !=` (all build
expressions; use `same(a, b)` to ask whether two expressions are identical), and
`& | ^ ~` on booleans. Integer `/` truncates toward zero, as in C and ONNX.
Constants made of constants fold: `const(2) * 3` is the constant 6.
"""

from mdsl.expr.evaluate import evaluate
from mdsl.expr.node import (
    OPS,
    Expr,
    OpInfo,
    apply,
    as_expr,
    cast,
    const,
    same,
    var,
    variables,
    walk,
)
from mdsl.expr.numpy_ops import NUMPY_OPS


def _unary(op: str):
    def fn(x) -> Expr:
        return apply(op, x)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Elementwise {op}(x)."
    return fn


def _binary(op: str):
    def fn(a, b) -> Expr:
        return apply(op, a, b)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Elementwise {op}(a, b)."
    return fn


exp, log, tanh, sigmoid, erf = map(_unary, ("exp", "log", "tanh", "sigmoid", "erf"))
sqrt, rsqrt, abs, sign = map(_unary, ("sqrt", "rsqrt", "abs", "sign"))
floor, ceil, round, sin, cos = map(_unary, ("floor", "ceil", "round", "sin", "cos"))
asin, acos, atan = map(_unary, ("asin", "acos", "atan"))
asinh, acosh, atanh = map(_unary, ("asinh", "acosh", "atanh"))
bitand, bitor, bitxor, shl, shr = map(_binary, ("bitand", "bitor", "bitxor", "shl", "shr"))
bitnot = _unary("bitnot")
min, max, pow, mod, fmod = map(_binary, ("min", "max", "pow", "mod", "fmod"))
lt, le, gt, ge, eq, ne = map(_binary, ("lt", "le", "gt", "ge", "eq", "ne"))
logical_and, logical_or, logical_xor = map(_binary, ("and", "or", "xor"))
minimum, maximum = min, max
mod.__doc__ = "Remainder with the sign of b (Python %, ONNX Mod); also `a % b`."
fmod.__doc__ = "Remainder with the sign of a (C fmod, ONNX Mod with fmod=1)."
round.__doc__ = "Round to the nearest integer, halves to even (ONNX Round, C rint)."


def logical_not(x) -> Expr:
    """Elementwise not(x) of a boolean."""
    return apply("not", x)


def select(cond, a, b) -> Expr:
    """`a` where `cond` is true, else `b` (ONNX Where, C `?:`).

    >>> import numpy as np, mdsl
    >>> x = mdsl.expr.var("x")
    >>> mdsl.expr.evaluate(mdsl.expr.select(x > 0, x, -x), {"x": np.array([-2, 3])})
    array([2, 3])
    """
    return apply("select", cond, a, b)


__all__ = [
    "NUMPY_OPS",
    "OPS",
    "Expr",
    "OpInfo",
    "abs",
    "acos",
    "acosh",
    "apply",
    "as_expr",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "bitand",
    "bitnot",
    "bitor",
    "bitxor",
    "cast",
    "ceil",
    "const",
    "cos",
    "eq",
    "erf",
    "evaluate",
    "exp",
    "floor",
    "fmod",
    "ge",
    "gt",
    "le",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "lt",
    "max",
    "maximum",
    "min",
    "minimum",
    "mod",
    "ne",
    "pow",
    "round",
    "rsqrt",
    "same",
    "select",
    "shl",
    "shr",
    "sigmoid",
    "sign",
    "sin",
    "sqrt",
    "tanh",
    "var",
    "variables",
    "walk",
]
