"""Matrix products (ONNX MatMul)."""

from __future__ import annotations

import numpy as np

from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.family import same_dtype
from mdsl.ops.precision import computes_in_float32
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import check
from mdsl.ops.shape_rules import broadcast_shapes


@op_proto(
    "MatMul", inputs={"a": "numeric", "b": "numeric"}, outputs={"y": "numeric"}, category="extern"
)
def matmul(a, b):
    """Matrix product with numpy.matmul semantics: 1-D operands are promoted, leading
    dims broadcast.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.matmul(g.input("a", ("B", 4, 8)), g.input("b", (8, 2)))
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('B'), 4, 2)
    """
    same_dtype("MatMul", a, b)
    check(a.rank >= 1 and b.rank >= 1, "MatMul needs operands of rank >= 1")
    a_shape = (1, *a.shape) if a.rank == 1 else a.shape
    b_shape = (*b.shape, 1) if b.rank == 1 else b.shape
    k_a, k_b = a_shape[-1], b_shape[-2]
    check(k_a == k_b, f"K of a ({k_a}) != K of b ({k_b})")
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    shape = (*batch, a_shape[-2], b_shape[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return TensorType(shape, a.dtype)


register_op_impl("MatMul", computes_in_float32(np.matmul))
