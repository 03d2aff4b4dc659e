"""GEMM operands read through a Transpose in place: no transposed copy is made.

Attention transposes K for `Q @ Kᵀ` and splits heads with `[B, S, H, D] -> [B, H, S, D]`;
BLAS reads a matrix with either dim of unit stride and any leading dimension, and the
GEMM kernel gives each batch entry its own offset, so a MatMul operand made by a
Transpose is its source with permuted strides whenever the matrix's last or second-last
dim has stride 1 in the source. The planner then skips a Transpose that only such
MatMuls read.
"""

from __future__ import annotations

from dataclasses import dataclass

from mdsl.codegen.access import contiguous_strides
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Node, Tensor

GEMM_DTYPES = (DType.float32, DType.float64)


@dataclass(frozen=True)
class MatrixView:
    """`tensor` read as a (batch of) matrices of the operand's `shape`: `strides` per dim
    of it, the matrix transposed or not, and its leading dimension."""

    tensor: Tensor
    shape: tuple
    strides: tuple
    transposed: bool
    ld: object


def transpose_view(t: Tensor) -> MatrixView | None:
    """The MatMul operand `t` as a view of the Transpose source it was made from, or None
    when `t` is not a Transpose's output or its matrix has no unit-stride dim.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     k = g.input("k", (2, 5, 3))
    ...     kt = mdsl.ops.transpose(k, perm=(0, 2, 1))
    ...     g.output(kt, "kt")
    >>> v = transpose_view(kt)
    >>> v.tensor is k, v.strides, v.transposed, v.ld
    (True, (15, 1, 3), True, 3)
    """
    node = t.producer
    if node is None or node.op_type != "Transpose" or len(t.shape) < 2:
        return None
    source = node.inputs[0]
    if source.type.storage_format is not None or t.type.storage_format is not None:
        return None
    perm = node.attrs.get("perm") or tuple(reversed(range(len(source.shape))))
    own = contiguous_strides(tuple(source.shape))
    strides = tuple(own[p] for p in perm)
    rows, cols = strides[-2], strides[-1]
    n_rows, n_cols = t.shape[-2], t.shape[-1]
    if cols == 1:
        return MatrixView(source, tuple(t.shape), strides, False, _leading(rows, n_rows, n_cols))
    if rows == 1:
        return MatrixView(source, tuple(t.shape), strides, True, _leading(cols, n_cols, n_rows))
    return None


def _leading(stride, n_lines, line_length):
    """The leading dimension of a matrix of `n_lines` lines: the stride between them.
    One line is read whatever the stride, but BLAS refuses a leading dimension below
    the line's length (a (1, n) view of an (n, 1) tensor has stride 1)."""
    if n_lines == 1 and isinstance(stride, int) and isinstance(line_length, int):
        return max(stride, line_length)
    return stride


def read_in_place(transpose: Node, uses: list[tuple[Node, int]]) -> bool:
    """Whether every reader of `transpose`'s output is a MatMul that reads it in place
    (so the transposed copy need not exist)."""
    out = transpose.outputs[0]
    if not uses or transpose_view(out) is None:
        return False
    for node, index in uses:
        if node.op_type != "MatMul" or index > 1 or len(node.inputs[1 - index].shape) < 2:
            return False
        if any(x.dtype not in GEMM_DTYPES or x.dtype != out.dtype for x in node.inputs):
            return False
        if any(x.type.storage_format is not None for x in (*node.inputs, *node.outputs)):
            return False
    return True
