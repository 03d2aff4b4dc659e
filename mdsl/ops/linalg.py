"""Matrix products (ONNX MatMul)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.family import same_dtype
from mdsl.ops.precision import computes_in_float32
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
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


@op_proto(
    "Trilu",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"upper": Attr(bool, default=True), "k": Attr(int, default=0)},
    category="opaque",
)
def _trilu(x, *, upper, k):
    """The upper (or lower) triangle of the last two dims, the rest zero (ONNX Trilu)."""
    check(x.rank >= 2, f"Trilu needs an input of rank >= 2, got rank {x.rank}")
    return TensorType(x.shape, x.dtype, x.format)


def trilu(x, *, upper: bool = True, k: int = 0, name=None) -> Tensor:
    """Keep the elements on and above (`upper`) or on and below the k-th diagonal of the
    last two dims of `x` and zero the others (ONNX Trilu; numpy.triu / numpy.tril).
    `k` > 0 moves the diagonal up, < 0 down.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.trilu(g.input("x", (2, 3)), upper=False), "y")
    >>> mdsl.interpret(g, {"x": np.ones((2, 3), np.float32)})["y"]
    array([[1., 0., 0.],
           [1., 1., 0.]], dtype=float32)
    """
    return _trilu(x, upper=upper, k=k, name=name)


def _trilu_ref(x, *, upper, k):
    return np.triu(x, k) if upper else np.tril(x, k)


register_op_impl("Trilu", _trilu_ref)

# a compiled loop of its own (masks.c), so the C backend needs no callback
MASKS_C_SOURCE = (Path(__file__).with_name("masks.c")).read_text()
register_op_impl("Trilu", backend="c", source=MASKS_C_SOURCE, symbol="masks_trilu")
