"""Elementwise arithmetic and comparisons (ONNX Add, Sub, Mul, Div, Pow, Neg, Less, ...)."""

from __future__ import annotations

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ops.family import binary_pointwise, unary_pointwise


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        # ONNX integer Div truncates toward zero (C semantics), unlike numpy's floor
        return np.trunc(np.true_divide(a, b)).astype(a.dtype)
    return np.true_divide(a, b)


add = binary_pointwise("Add", np.add)
sub = binary_pointwise("Sub", np.subtract)
mul = binary_pointwise("Mul", np.multiply)
div = binary_pointwise("Div", _div)
pow = binary_pointwise("Pow", np.power)
less = binary_pointwise("Less", np.less, out_dtype=DType.bool_)
less_equal = binary_pointwise("LessOrEqual", np.less_equal, out_dtype=DType.bool_)
greater = binary_pointwise("Greater", np.greater, out_dtype=DType.bool_)
greater_equal = binary_pointwise("GreaterOrEqual", np.greater_equal, out_dtype=DType.bool_)
equal = binary_pointwise("Equal", np.equal, "any", out_dtype=DType.bool_)

neg = unary_pointwise("Neg", np.negative, "numeric")
abs = unary_pointwise("Abs", np.abs, "numeric")
exp = unary_pointwise("Exp", np.exp)
log = unary_pointwise("Log", np.log)
sqrt = unary_pointwise("Sqrt", np.sqrt)
tanh = unary_pointwise("Tanh", np.tanh)
relu = unary_pointwise("Relu", lambda x: np.maximum(x, x.dtype.type(0)), "numeric")
