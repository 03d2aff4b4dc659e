"""Scalar-expression forms of the built-in pointwise ops (their "expr" bindings).

One table, keyed by op type: each entry takes one `mdsl.expr` value per op input (in the
prototype's order, None for an absent optional input) and the op's attrs as keywords, and
returns the expression computing one output element. This is what lets the code
generators fuse chains of pointwise ops and render them for every target.

The entries are registered as library defaults (`register_builtin_impl`): the numpy
references stay what the interpreter runs for built-ins by default, and a user's own
registration for an op wins over both.

>>> import mdsl
>>> print(LOWERINGS["Gelu"](mdsl.expr.var("x"), approximate="none"))
0.5 * x * (1.0 + erf(x / 1.4142135623730951))
"""

from __future__ import annotations

import functools
import math

from mdsl import expr as E
from mdsl.ops.bindings import register_builtin_impl

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu(x, *, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + E.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + E.erf(x / math.sqrt(2.0)))


def _clip(x, min=None, max=None):
    if min is not None:
        x = E.max(x, min)
    if max is not None:
        x = E.min(x, max)
    return x


def _softplus(x):
    return E.max(x, 0.0) + E.log(1.0 + E.exp(-E.abs(x)))  # log(1 + exp(x)) without overflow


def _hard_clamp(x):
    return E.min(E.max(x, 0.0), 1.0)


def _batch_norm(x, scale, bias, mean, var, *, epsilon, momentum, training_mode):
    return (x - mean) * (1.0 / E.sqrt(var + epsilon)) * scale + bias


def _quantize(x, scale, zero_point=None, *, axis, output_dtype, saturate=1):
    # saturation to the output's integer range is the final cast's (see mdsl.expr.cast)
    q = E.round(x / scale)
    return q if zero_point is None else q + zero_point


def _dequantize(x, scale, zero_point=None, *, axis):
    q = (
        E.cast(x, "int32")
        if zero_point is None
        else E.cast(x, "int32") - E.cast(zero_point, "int32")
    )
    return q * scale


LOWERINGS = {
    # arithmetic
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": lambda a, b: a / b,
    "Pow": lambda a, b: a**b,
    "Mod": lambda a, b, *, fmod: E.fmod(a, b) if fmod else a % b,
    "Neg": lambda x: -x,
    "Abs": E.abs,
    "Reciprocal": lambda x: 1 / x,
    "Max": lambda *data: functools.reduce(E.max, data),
    "Min": lambda *data: functools.reduce(E.min, data),
    # math
    "Exp": E.exp,
    "Log": E.log,
    "Sqrt": E.sqrt,
    "Rsqrt": E.rsqrt,
    "Tanh": E.tanh,
    "Erf": E.erf,
    "Sin": E.sin,
    "Cos": E.cos,
    "Asin": E.asin,
    "Acos": E.acos,
    "Atan": E.atan,
    "Asinh": E.asinh,
    "Acosh": E.acosh,
    "Atanh": E.atanh,
    "Floor": E.floor,
    "Ceil": E.ceil,
    "Round": E.round,
    "Sign": E.sign,
    # comparisons, logic, selection
    "Less": lambda a, b: a < b,
    "LessOrEqual": lambda a, b: a <= b,
    "Greater": lambda a, b: a > b,
    "GreaterOrEqual": lambda a, b: a >= b,
    "Equal": lambda a, b: a == b,
    "IsNaN": lambda x: x != x,
    "Not": lambda x: ~x,
    "And": lambda a, b: a & b,
    "Or": lambda a, b: a | b,
    "Xor": lambda a, b: a ^ b,
    "BitwiseAnd": E.bitand,
    "BitwiseOr": E.bitor,
    "BitwiseXor": E.bitxor,
    "BitwiseNot": E.bitnot,
    "BitShift": lambda x, y, *, direction: (E.shl if direction == "LEFT" else E.shr)(x, y),
    "Where": E.select,
    "Clip": _clip,
    "Cast": lambda x, *, to: E.cast(x, to),
    # activations
    "Relu": lambda x: E.max(x, 0),
    "Sigmoid": E.sigmoid,
    "Silu": lambda x: x * E.sigmoid(x),
    "Gelu": _gelu,
    "LeakyRelu": lambda x, *, alpha: E.select(x >= 0, x, alpha * x),
    "PRelu": lambda x, slope: E.select(x >= 0, x, slope * x),
    "Elu": lambda x, *, alpha: E.select(x > 0, x, alpha * (E.exp(E.min(x, 0.0)) - 1.0)),
    "HardSigmoid": lambda x, *, alpha, beta: _hard_clamp(alpha * x + beta),
    "HardSwish": lambda x: x * _hard_clamp(x / 6.0 + 0.5),
    "Softplus": _softplus,
    # normalization and quantization with per-channel parameters
    "BatchNormalization": _batch_norm,
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
}

# binding options (see mdsl.ops.bindings.EXPR_OPTIONS): per-axis parameter inputs
OPTIONS = {
    "BatchNormalization": {"axis_inputs": ("scale", "bias", "mean", "var"), "axis": 1},
    "QuantizeLinear": {"axis_inputs": ("scale", "zero_point"), "axis": "axis"},
    "DequantizeLinear": {"axis_inputs": ("scale", "zero_point"), "axis": "axis"},
}


def register_lowerings() -> None:
    """Register every table entry as its op's library-default "expr" binding."""
    for op_type, lowering in LOWERINGS.items():
        register_builtin_impl(op_type, lowering, backend="expr", **OPTIONS.get(op_type, {}))


register_lowerings()
