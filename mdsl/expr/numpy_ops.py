"""The numpy meaning of every scalar-expression op: `op name -> numpy function`.

Like tinygrad's `code_for_op`, this is one table per target; a C, numba or AscendC
renderer adds its own table beside this one. Each function takes numpy arrays or Python
scalars (constants stay Python scalars so they adopt the other operand's dtype, numpy's
"weak scalar" rule) and broadcasts like numpy.

Semantics follow C where numpy differs, since compiled targets must agree with this
table: integer `div` truncates toward zero (ONNX Div, C `/`), `round` rounds half to
even (ONNX Round, C `rint`), `mod` takes the divisor's sign (Python `%`, ONNX Mod)
while `fmod` takes the dividend's (C `fmod`), and where C is undefined the table picks
one meaning every target must share: a float cast to an integer saturates.
"""

from __future__ import annotations

import math

import numpy as np

from mdsl.ir.dtype import DType

_FLOAT_NP = frozenset(d.np for d in (DType.float16, DType.bfloat16, DType.float32, DType.float64))


def _is_integer(x) -> bool:
    return np.issubdtype(np.asarray(x).dtype, np.integer)


def _div(a, b):
    if not (_is_integer(a) and _is_integer(b)):
        return np.true_divide(a, b)
    return truncating_divide(a, b)


def truncating_divide(a, b):
    """Integer a / b truncated toward zero (ONNX Div, C `/`), exactly (no float
    round trip), with numpy's results where C is undefined: x / 0 == 0 and
    INT_MIN / -1 == INT_MIN (docs/generated-code-ub.md).

    >>> truncating_divide(np.array([7, -7, 5, np.iinfo(np.int32).min], np.int32),
    ...                   np.array([2, 2, 0, -1], np.int32)).tolist()
    [3, -3, 0, -2147483648]
    """
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        quotient = np.floor_divide(a, b)
        inexact = np.remainder(a, b) != 0
    negative = np.less(a, 0) != np.less(b, 0)
    return np.where(inexact & negative, quotient + 1, quotient).astype(np.result_type(quotient))


def _quiet(fn):
    """`fn` without numpy's warnings for x % 0 (its integer result, 0, is the rule)."""

    def quiet(a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            return fn(a, b)

    return quiet


def sigmoid(x):
    """1 / (1 + exp(-x)), the numpy reference of every sigmoid in mdsl."""
    e = np.exp(np.negative(np.abs(x)))  # exp only ever sees -|x|: no overflow
    return np.where(np.greater_equal(x, 0), 1 / (1 + e), e / (1 + e))


def _rsqrt(x):
    return 1 / np.sqrt(x)


_erf_object = np.frompyfunc(math.erf, 1, 1)


def erf64(x) -> np.ndarray:
    """The error function of `x` in float64 (numpy has no erf ufunc): the numpy
    reference of every erf in mdsl."""
    return np.asarray(_erf_object(np.asarray(x, np.float64)), dtype=np.float64)


def _erf(x):
    """numpy has no erf: math.erf per element in float64, returned in x's float dtype."""
    if isinstance(x, (bool, int, float)):
        return math.erf(x)
    arr = np.asarray(x)
    dtype = arr.dtype if arr.dtype in _FLOAT_NP else np.dtype(np.float64)
    return erf64(arr).astype(dtype)


def shift_left(x, y):
    """x << y (ONNX BitShift LEFT) with one meaning where C is undefined: a shift by the
    type's width or more, or by a negative count, gives 0.

    >>> shift_left(np.array([1, 3, 255], np.uint8), np.array([1, 2, 8], np.uint8)).tolist()
    [2, 12, 0]
    """
    x, y = np.asarray(x), np.asarray(y)
    bits = x.dtype.itemsize * 8
    inside = (y >= 0) & (y < bits)
    shifted = np.left_shift(x, np.where(inside, y, 0).astype(x.dtype))
    return np.where(inside, shifted, 0).astype(x.dtype)


def shift_right(x, y):
    """x >> y (ONNX BitShift RIGHT), arithmetic for signed types; a shift by the type's
    width or more (or a negative one) gives 0, or -1 for a negative signed x (its sign).

    >>> shift_right(np.array([16, -16], np.int8), np.array([2, 9], np.int8)).tolist()
    [4, -1]
    """
    x, y = np.asarray(x), np.asarray(y)
    bits = x.dtype.itemsize * 8
    inside = (y >= 0) & (y < bits)
    shifted = np.right_shift(x, np.where(inside, y, bits - 1).astype(x.dtype))
    keeps_sign = x.dtype.kind == "i"  # x >> (bits - 1) is x's sign: 0 or -1
    return (shifted if keeps_sign else np.where(inside, shifted, 0)).astype(x.dtype)


def saturating_astype(value, dtype: np.dtype) -> np.ndarray:
    """`value` converted to `dtype`; a float becoming an integer saturates to the integer
    range (NaN becomes 0). C leaves that conversion undefined, so every target's renderer
    must do the same; everything else converts as numpy's astype does."""
    arr = np.asarray(value)
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu" or arr.dtype.kind in "biu":
        return arr.astype(dtype)
    info = np.iinfo(dtype)
    hi = np.float64(info.max)
    if int(hi) > info.max:  # int64's max is not a float64: the largest float below it
        hi = np.nextafter(hi, 0)
    wide = np.nan_to_num(arr.astype(np.float64), nan=0.0)
    clipped = np.clip(wide, float(info.min), hi).astype(dtype)
    return np.where(wide > hi, np.array(info.max, dtype), clipped)


def _cast(x, dtype: DType):
    return saturating_astype(x, dtype.np)


NUMPY_OPS = {
    "neg": np.negative,
    "not": np.logical_not,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _div,
    "pow": np.power,
    "mod": _quiet(np.mod),
    "fmod": _quiet(np.fmod),
    "min": np.minimum,
    "max": np.maximum,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "xor": np.logical_xor,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "erf": _erf,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,
    "sin": np.sin,
    "cos": np.cos,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sign": np.sign,
    "bitand": np.bitwise_and,
    "bitor": np.bitwise_or,
    "bitxor": np.bitwise_xor,
    "bitnot": np.invert,
    "shl": shift_left,
    "shr": shift_right,
    "select": np.where,
    "cast": _cast,
}
