"""Activation functions (ONNX Sigmoid, Gelu, LeakyRelu, HardSigmoid, HardSwish, Softplus,
Elu, PRelu) and SiLU, which ONNX spells Mul(x, Sigmoid(x)).

References compute half floats in float32 and round once (see `mdsl.ops.precision`).
"""

from __future__ import annotations

import math

import numpy as np

from mdsl.expr import numpy_ops
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.docgen import pointwise_doc
from mdsl.ops.elementwise import erf_values
from mdsl.ops.family import same_dtype, unary_pointwise
from mdsl.ops.precision import computes_in_float32
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import broadcast_shapes

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def sigmoid_values(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow, in x's dtype."""
    return numpy_ops.sigmoid(x).astype(x.dtype)


def _gelu(x, *, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + erf_values(x / math.sqrt(2.0)))


def _leaky_relu(x, *, alpha):
    return np.where(x >= 0, x, alpha * x)


def _hard_sigmoid(x, *, alpha, beta):
    return np.clip(alpha * x + beta, 0.0, 1.0)


def _hard_swish(x):
    return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def _elu(x, *, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


sigmoid = unary_pointwise(
    "Sigmoid",
    computes_in_float32(sigmoid_values),
    doc=pointwise_doc(
        "1 / (1 + exp(-x)) (ONNX Sigmoid).",
        "sigmoid(x)",
        "array([0.5, 1. ], dtype=float32)",
        x=[0.0, 100.0],
    ),
    cost="transcendental",
)
silu = unary_pointwise(
    "Silu",
    computes_in_float32(lambda x: x * sigmoid_values(x)),
    doc=pointwise_doc(
        "x * sigmoid(x), also called swish. Not an ONNX op: ONNX graphs spell it "
        "Mul(x, Sigmoid(x)); the importer may fuse that pair into Silu.",
        "silu(x)",
        "array([  0., 100.], dtype=float32)",
        x=[0.0, 100.0],
    ),
    cost="transcendental",
)
gelu = unary_pointwise(
    "Gelu",
    computes_in_float32(_gelu),
    attrs={"approximate": Attr(str, default="none", choices=("none", "tanh"))},
    doc=pointwise_doc(
        'x * Phi(x), Phi the standard normal CDF (ONNX Gelu). `approximate="tanh"` uses '
        "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).",
        'gelu(x, approximate="tanh")',
        "array([ 0., 10.], dtype=float32)",
        x=[0.0, 10.0],
    ),
    cost="transcendental",
)
leaky_relu = unary_pointwise(
    "LeakyRelu",
    computes_in_float32(_leaky_relu),
    attrs={"alpha": Attr(float, default=0.01)},
    doc=pointwise_doc(
        "x for x >= 0, alpha * x below (ONNX LeakyRelu, alpha=0.01).",
        "leaky_relu(x, alpha=0.1)",
        "array([-0.2,  3. ], dtype=float32)",
        x=[-2.0, 3.0],
    ),
)
hard_sigmoid = unary_pointwise(
    "HardSigmoid",
    computes_in_float32(_hard_sigmoid),
    attrs={"alpha": Attr(float, default=0.2), "beta": Attr(float, default=0.5)},
    doc=pointwise_doc(
        "max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid, alpha=0.2, beta=0.5). "
        "PyTorch's hardsigmoid is alpha=1/6.",
        "hard_sigmoid(x)",
        "array([0. , 0.5, 1. ], dtype=float32)",
        x=[-5.0, 0.0, 5.0],
    ),
)
hard_swish = unary_pointwise(
    "HardSwish",
    computes_in_float32(_hard_swish),
    doc=pointwise_doc(
        "x * max(0, min(1, x / 6 + 0.5)) (ONNX HardSwish).",
        "hard_swish(x)",
        "array([-0.,  0.,  4.], dtype=float32)",
        x=[-4.0, 0.0, 4.0],
    ),
    cost="transcendental",
)
softplus = unary_pointwise(
    "Softplus",
    computes_in_float32(lambda x: np.logaddexp(0.0, x)),
    doc=pointwise_doc(
        "log(1 + exp(x)), without overflow for large x (ONNX Softplus).",
        "softplus(x)",
        "array([  0.6931472, 100.       ], dtype=float32)",
        x=[0.0, 100.0],
    ),
    cost="transcendental",
)
elu = unary_pointwise(
    "Elu",
    computes_in_float32(_elu),
    attrs={"alpha": Attr(float, default=1.0)},
    doc=pointwise_doc(
        "x for x > 0, alpha * (exp(x) - 1) below (ONNX Elu, alpha=1.0).",
        "elu(x, alpha=2.0)",
        "array([-2.,  1.], dtype=float32)",
        x=[-100.0, 1.0],
    ),
    cost="transcendental",
)


@op_proto(
    "PRelu",
    inputs={"x": "numeric", "slope": "numeric"},
    outputs={"y": "numeric"},
    category="pointwise",
)
def prelu(x, slope):
    """x for x >= 0, slope * x below; `slope` broadcasts to x's shape (ONNX PRelu). For
    per-channel slopes of an NCHW tensor give slope the shape (C, 1, 1).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 2, 1, 1))
    ...     slope = g.const("slope", np.array([[[0.1]], [[0.5]]], np.float32))
    ...     g.output(mdsl.ops.prelu(x, slope), "y")
    >>> mdsl.interpret(g, {"x": np.full((1, 2, 1, 1), -2.0, np.float32)})["y"].ravel()
    array([-0.2, -1. ], dtype=float32)
    """
    same_dtype("PRelu", x, slope)
    shape = broadcast_shapes(x.shape, slope.shape)
    check(
        shape == x.shape,
        f"PRelu slope of shape {slope.shape} must broadcast to x's shape {x.shape}",
    )
    return TensorType(x.shape, x.dtype, x.format)


@computes_in_float32
def _prelu(x, slope):
    return np.where(x >= 0, x, slope * x).astype(x.dtype)


register_op_impl("PRelu", _prelu)
