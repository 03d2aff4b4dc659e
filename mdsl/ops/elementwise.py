"""Elementwise arithmetic, math, logic and selection (ONNX Add, Sub, ..., Where, Clip, Max)."""

from __future__ import annotations

import functools
import math

import numpy as np

from mdsl.expr.numpy_ops import erf64, truncating_divide
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.apply import building_graph, scalar_const
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.docgen import pointwise_doc
from mdsl.ops.family import binary_pointwise, same_dtype, unary_pointwise
from mdsl.ops.precision import computes_in_float32
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, In, check
from mdsl.ops.shape_rules import broadcast_shapes


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        return truncating_divide(a, b)
    return np.true_divide(a, b)


add = binary_pointwise("Add", np.add)
sub = binary_pointwise("Sub", np.subtract)
mul = binary_pointwise("Mul", np.multiply)
div = binary_pointwise("Div", _div)
pow = binary_pointwise("Pow", np.power, cost="transcendental")
less = binary_pointwise("Less", np.less, out_dtype=DType.bool_)
less_equal = binary_pointwise("LessOrEqual", np.less_equal, out_dtype=DType.bool_)
greater = binary_pointwise("Greater", np.greater, out_dtype=DType.bool_)
greater_equal = binary_pointwise("GreaterOrEqual", np.greater_equal, out_dtype=DType.bool_)
equal = binary_pointwise("Equal", np.equal, "any", out_dtype=DType.bool_)

neg = unary_pointwise("Neg", np.negative, "numeric")
abs = unary_pointwise("Abs", np.abs, "numeric")
exp = unary_pointwise("Exp", np.exp, cost="transcendental")
log = unary_pointwise("Log", np.log, cost="transcendental")
sqrt = unary_pointwise("Sqrt", np.sqrt, cost="transcendental")
tanh = unary_pointwise("Tanh", np.tanh, cost="transcendental")
relu = unary_pointwise("Relu", lambda x: np.maximum(x, x.dtype.type(0)), "numeric")


# -- more math -------------------------------------------------------------------------------
erf_values = erf64  # the error function in float64 (numpy has no erf ufunc)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


reciprocal = unary_pointwise(
    "Reciprocal",
    computes_in_float32(np.reciprocal),
    doc=pointwise_doc(
        "1 / x (ONNX Reciprocal).",
        "reciprocal(x)",
        "array([ 0.5, -4. ], dtype=float32)",
        x=[2.0, -0.25],
    ),
)
rsqrt = unary_pointwise(
    "Rsqrt",
    computes_in_float32(_rsqrt),
    doc=pointwise_doc(
        "1 / sqrt(x). Not an ONNX op: ONNX graphs spell it Reciprocal(Sqrt(x)).",
        "rsqrt(x)",
        "array([0.5 , 0.25], dtype=float32)",
        x=[4.0, 16.0],
    ),
    cost="transcendental",
)
erf = unary_pointwise(
    "Erf",
    erf_values,
    doc=pointwise_doc(
        "The Gauss error function (ONNX Erf).",
        "erf(x)",
        "array([0., 1.], dtype=float32)",
        x=[0.0, 10.0],
    ),
    cost="transcendental",
)
sin = unary_pointwise(
    "Sin",
    computes_in_float32(np.sin),
    doc=pointwise_doc(
        "Sine of x in radians (ONNX Sin).",
        "sin(x)",
        "array([0., 1.], dtype=float32)",
        x=[0.0, math.pi / 2],
    ),
    cost="transcendental",
)
cos = unary_pointwise(
    "Cos",
    computes_in_float32(np.cos),
    doc=pointwise_doc(
        "Cosine of x in radians (ONNX Cos).",
        "cos(x)",
        "array([ 1., -1.], dtype=float32)",
        x=[0.0, math.pi],
    ),
    cost="transcendental",
)
floor = unary_pointwise(
    "Floor",
    computes_in_float32(np.floor),
    doc=pointwise_doc(
        "The largest integer <= x (ONNX Floor).",
        "floor(x)",
        "array([-2.,  0.,  2.], dtype=float32)",
        x=[-1.5, 0.2, 2.7],
    ),
)
ceil = unary_pointwise(
    "Ceil",
    computes_in_float32(np.ceil),
    doc=pointwise_doc(
        "The smallest integer >= x (ONNX Ceil).",
        "ceil(x)",
        "array([-1.,  1.,  3.], dtype=float32)",
        x=[-1.5, 0.2, 2.7],
    ),
)
round = unary_pointwise(
    "Round",
    computes_in_float32(np.round),
    doc=pointwise_doc(
        "The nearest integer, halves to even (ONNX Round).",
        "round(x)",
        "array([0., 2., 2., 3.], dtype=float32)",
        x=[0.5, 1.5, 2.5, 2.6],
    ),
)
sign = unary_pointwise(
    "Sign",
    computes_in_float32(np.sign),
    "numeric",
    doc=pointwise_doc(
        "-1, 0 or 1 by the sign of x (ONNX Sign).",
        "sign(x)",
        "array([-1.,  0.,  1.], dtype=float32)",
        x=[-3.0, 0.0, 0.5],
    ),
)
is_nan = unary_pointwise(
    "IsNaN",
    computes_in_float32(np.isnan),
    out_dtype=DType.bool_,
    doc=pointwise_doc(
        "True where x is NaN (ONNX IsNaN).",
        "is_nan(x)",
        "array([False,  True])",
        x=[1.0, float("nan")],
    ),
)


# -- inverse and hyperbolic trigonometry ------------------------------------------------------
def _trig(op_type: str, reference, summary: str, x: list, result: str):
    return unary_pointwise(
        op_type,
        computes_in_float32(reference),
        doc=pointwise_doc(summary, f"{op_type.lower()}(x)", result, x=x),
        cost="transcendental",
    )


acos = _trig(
    "Acos", np.arccos, "Arccosine, in radians (ONNX Acos).", [1.0], "array([0.], dtype=float32)"
)
asin = _trig(
    "Asin", np.arcsin, "Arcsine, in radians (ONNX Asin).", [0.0], "array([0.], dtype=float32)"
)
atan = _trig(
    "Atan", np.arctan, "Arctangent, in radians (ONNX Atan).", [0.0], "array([0.], dtype=float32)"
)
acosh = _trig(
    "Acosh",
    np.arccosh,
    "Inverse hyperbolic cosine (ONNX Acosh).",
    [1.0],
    "array([0.], dtype=float32)",
)
asinh = _trig(
    "Asinh",
    np.arcsinh,
    "Inverse hyperbolic sine (ONNX Asinh).",
    [0.0],
    "array([0.], dtype=float32)",
)
atanh = _trig(
    "Atanh",
    np.arctanh,
    "Inverse hyperbolic tangent (ONNX Atanh).",
    [0.0],
    "array([0.], dtype=float32)",
)

# -- logic -----------------------------------------------------------------------------------
logical_not = unary_pointwise(
    "Not",
    np.logical_not,
    "bool",
    doc=pointwise_doc(
        "Elementwise logical not (ONNX Not).",
        "logical_not(x)",
        "array([False,  True])",
        "bool",
        x=[True, False],
    ),
)
logical_and = binary_pointwise(
    "And",
    np.logical_and,
    "bool",
    doc=pointwise_doc(
        "Elementwise logical and, broadcasting (ONNX And).",
        "logical_and(a, b)",
        "array([ True, False])",
        "bool",
        a=[True, True],
        b=[True, False],
    ),
)
logical_or = binary_pointwise(
    "Or",
    np.logical_or,
    "bool",
    doc=pointwise_doc(
        "Elementwise logical or, broadcasting (ONNX Or).",
        "logical_or(a, b)",
        "array([ True, False])",
        "bool",
        a=[True, False],
        b=[False, False],
    ),
)
logical_xor = binary_pointwise(
    "Xor",
    np.logical_xor,
    "bool",
    doc=pointwise_doc(
        "Elementwise exclusive or, broadcasting (ONNX Xor).",
        "logical_xor(a, b)",
        "array([False,  True])",
        "bool",
        a=[True, True],
        b=[True, False],
    ),
)


# -- Mod -------------------------------------------------------------------------------------
@op_proto(
    "Mod",
    inputs={"a": "numeric", "b": "numeric"},
    outputs={"c": "numeric"},
    attrs={"fmod": Attr(bool, default=False)},
    category="pointwise",
)
def mod(a, b, *, fmod):
    """Remainder of a / b with broadcasting (ONNX Mod). `fmod=False`: the sign follows b
    (Python's %); `fmod=True`: the sign follows a (C's fmod).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     a, b = g.input("a", (2,), "int32"), g.input("b", (2,), "int32")
    ...     g.output(mdsl.ops.mod(a, b), "floor")
    ...     g.output(mdsl.ops.mod(a, b, fmod=True), "trunc")
    >>> out = mdsl.interpret(g, {"a": np.array([-7, 7], np.int32), "b": np.array([3, -3], np.int32)})
    >>> out["floor"], out["trunc"]
    (array([ 2, -2], dtype=int32), array([-1,  1], dtype=int32))
    """
    same_dtype("Mod", a, b)
    return TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)


@computes_in_float32
def _mod_ref(a, b, *, fmod):
    with np.errstate(divide="ignore", invalid="ignore"):  # x % 0 is unspecified by ONNX
        return (np.fmod if fmod else np.mod)(a, b)


# -- selection -------------------------------------------------------------------------------
@op_proto(
    "Where",
    inputs={"condition": "bool", "x": "any", "y": "any"},
    outputs={"output": "any"},
    category="pointwise",
)
def _where_node(condition, x, y):
    """x where condition holds, else y; all three broadcast (ONNX Where)."""
    same_dtype("Where", x, y)
    return TensorType(broadcast_shapes(condition.shape, x.shape, y.shape), x.dtype)


def where(condition, x, y, *, name: str | None = None) -> Tensor:
    """`x` where `condition` holds, else `y`; all three broadcast (ONNX Where). A Python
    number for `x` or `y` becomes a constant of the other one's dtype.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N",))
    ...     g.output(mdsl.ops.where(x > 0.0, x, 0.0), "y")
    >>> mdsl.interpret(g, {"x": np.array([-1.0, 2.0], np.float32)})["y"]
    array([0., 2.], dtype=float32)
    """
    return _where_node(condition, _scalar_like(x, y), _scalar_like(y, x), name=name)


def _scalar_like(value, other):
    """A Python number as a constant of `other`'s dtype (the builder's default would take
    the dtype of the first tensor argument: Where's boolean condition)."""
    if isinstance(other, Tensor) and isinstance(value, (bool, int, float, np.number)):
        return scalar_const(building_graph("op Where"), value, other.dtype)
    return value


@op_proto(
    "Clip",
    inputs={
        "x": "numeric",
        "min": In("numeric", optional=True),
        "max": In("numeric", optional=True),
    },
    outputs={"y": "numeric"},
    category="pointwise",
)
def clip(x, min, max):
    """Limit `x` to [min, max]; either bound may be None (ONNX Clip). Bounds are scalars
    (Python numbers become constants of x's dtype); if min > max every value becomes max.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.clip(g.input("x", (3,)), 0.0, 6.0), "y")
    >>> mdsl.interpret(g, {"x": np.array([-1.0, 3.0, 9.0], np.float32)})["y"]
    array([0., 3., 6.], dtype=float32)
    """
    same_dtype("Clip", x, min, max)
    for label, bound in (("min", min), ("max", max)):
        if bound is not None:
            check(bound.numel == 1, f"Clip {label} must be a scalar, got shape {bound.shape}")
    return TensorType(x.shape, x.dtype, x.format)


def _clip_ref(x, lo=None, hi=None):
    if lo is not None:
        x = np.maximum(x, lo.reshape(()))
    if hi is not None:
        x = np.minimum(x, hi.reshape(()))
    return x


def _variadic_pointwise(op_type: str, doc: str):
    """Declare an elementwise op over any number (>= 1) of broadcasting inputs."""

    def infer(*xs):
        same_dtype(op_type, *xs)
        return TensorType(broadcast_shapes(*(t.shape for t in xs)), xs[0].dtype)

    infer.__doc__ = doc
    return op_proto(
        op_type,
        inputs={"data": In("numeric", variadic=True)},
        outputs={"y": "numeric"},
        category="pointwise",
    )(infer)


_max_node = _variadic_pointwise("Max", "Elementwise maximum of its inputs (ONNX Max).")
_min_node = _variadic_pointwise("Min", "Elementwise minimum of its inputs (ONNX Min).")


def maximum(*tensors, name: str | None = None) -> Tensor:
    """Elementwise maximum of one or more broadcasting tensors (ONNX Max; not the
    reduction, which is `reduce_max`). Python numbers become constants.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     a, b = g.input("a", (3,)), g.input("b", (1,))
    ...     g.output(mdsl.ops.maximum(a, b, 0.5), "y")
    >>> out = mdsl.interpret(g, {"a": np.array([0.0, 1.0, 2.0], np.float32),
    ...                          "b": np.array([1.5], np.float32)})
    >>> out["y"]
    array([1.5, 1.5, 2. ], dtype=float32)
    """
    return _max_node(list(tensors), name=name)


def minimum(*tensors, name: str | None = None) -> Tensor:
    """Elementwise minimum of one or more broadcasting tensors (ONNX Min; not the
    reduction, which is `reduce_min`). Python numbers become constants.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     a, b = g.input("a", (3,)), g.input("b", (3,))
    ...     g.output(mdsl.ops.minimum(a, b), "y")
    >>> out = mdsl.interpret(g, {"a": np.array([0.0, 1.0, 2.0], np.float32),
    ...                          "b": np.array([1.0, 1.0, 1.0], np.float32)})
    >>> out["y"]
    array([0., 1., 1.], dtype=float32)
    """
    return _min_node(list(tensors), name=name)


register_op_impl("Mod", _mod_ref)
register_op_impl("Where", lambda condition, x, y: np.where(condition, x, y))
register_op_impl("Clip", _clip_ref)
register_op_impl("Max", lambda *xs: functools.reduce(np.maximum, xs))
register_op_impl("Min", lambda *xs: functools.reduce(np.minimum, xs))
