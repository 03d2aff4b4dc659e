"""Bitwise integer ops (ONNX BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitShift).

They work on the bits of integer tensors of one dtype, broadcasting like every binary
pointwise op. (And, Or, Xor and Not are the logical ops on bool tensors.)
"""

from __future__ import annotations

import numpy as np

from mdsl.expr.numpy_ops import shift_left, shift_right
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.docgen import pointwise_doc
from mdsl.ops.family import binary_pointwise, same_dtype, unary_pointwise
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr
from mdsl.ops.shape_rules import broadcast_shapes

bitwise_and = binary_pointwise(
    "BitwiseAnd",
    np.bitwise_and,
    "int",
    doc=pointwise_doc(
        "The bits set in both a and b (ONNX BitwiseAnd).",
        "bitwise_and(a, b)",
        "array([1, 0], dtype=int32)",
        "int32",
        a=[3, 4],
        b=[5, 3],
    ),
)
bitwise_or = binary_pointwise(
    "BitwiseOr",
    np.bitwise_or,
    "int",
    doc=pointwise_doc(
        "The bits set in a or b (ONNX BitwiseOr).",
        "bitwise_or(a, b)",
        "array([7, 7], dtype=int32)",
        "int32",
        a=[3, 4],
        b=[5, 3],
    ),
)
bitwise_xor = binary_pointwise(
    "BitwiseXor",
    np.bitwise_xor,
    "int",
    doc=pointwise_doc(
        "The bits set in exactly one of a and b (ONNX BitwiseXor).",
        "bitwise_xor(a, b)",
        "array([6, 7], dtype=int32)",
        "int32",
        a=[3, 4],
        b=[5, 3],
    ),
)
bitwise_not = unary_pointwise(
    "BitwiseNot",
    np.invert,
    "int",
    doc=pointwise_doc(
        "Every bit of x flipped (ONNX BitwiseNot): -x - 1 for signed types.",
        "bitwise_not(x)",
        "array([-1, -6], dtype=int32)",
        "int32",
        x=[0, 5],
    ),
)

_DIRECTIONS = ("LEFT", "RIGHT")


@op_proto(
    "BitShift",
    inputs={"x": "int", "y": "int"},
    outputs={"z": "int"},
    attrs={"direction": Attr(str, choices=_DIRECTIONS)},
    category="pointwise",
)
def bit_shift(x, y, *, direction):
    """x shifted left or right by y bits, broadcasting (ONNX BitShift; `direction` is
    "LEFT" or "RIGHT"). Bits shifted out are lost; a shift by the type's width or more
    (or a negative one) gives 0, but a right shift of a negative signed value gives -1
    (its sign bits).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x, y = g.input("x", (3,), "uint8"), g.input("y", (3,), "uint8")
    ...     g.output(mdsl.ops.bit_shift(x, y, direction="LEFT"), "z")
    >>> mdsl.interpret(g, {"x": np.array([1, 3, 255], np.uint8), "y": np.array([1, 2, 8], np.uint8)})["z"]
    array([ 2, 12,  0], dtype=uint8)
    """
    same_dtype("BitShift", x, y)
    return TensorType(broadcast_shapes(x.shape, y.shape), x.dtype)


def _bit_shift_ref(x, y, *, direction):
    return (shift_left if direction == "LEFT" else shift_right)(x, y)


register_op_impl("BitShift", _bit_shift_ref)
