"""Torch calls that transformer code (Hugging Face models and the like) makes beyond
the core table of `torch_ops`: matmuls fused with an add (`addmm` in GPT-2's Conv1D,
`baddbmm`), logical reductions of masks (`all`, `any`), running sums and gathers of
position ids (`cumsum`, `gather`), and the in-place forms of table calls (`add_`,
`masked_fill_`, ...), which `torch_key` maps onto the out-of-place handler and the
tracers rebind to the mutated tensor.
"""

from __future__ import annotations

from mdsl.frontends.torch_ops import handles
from mdsl.ir.dtype import DType

_INTEGRAL = (DType.bool_, DType.int8, DType.uint8, DType.int16, DType.int32, DType.int64)


@handles("addmm")
def addmm(b, input, mat1, mat2, *, beta=1, alpha=1):
    """beta * input + alpha * mat1 @ mat2 as one Gemm (input broadcasts to the result)."""
    return b.op("Gemm", b.v(mat1), b.v(mat2), b.v(input), alpha=float(alpha), beta=float(beta))


@handles("baddbmm")
def baddbmm(b, input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * batch1 @ batch2, batched."""
    product = b.op("MatMul", b.v(batch1), b.v(batch2))
    if alpha != 1:
        product = b.op("Mul", product, float(alpha))
    if beta == 0:  # torch ignores input then, NaNs included
        return product
    base = b.v(input)
    if beta != 1:
        base = b.op("Mul", base, float(beta))
    return b.op("Add", base, product)


@handles("all", "any")
def all_any(b, input, dim=None, keepdim=False):
    """Whether all (any) elements are nonzero: a min (max) over the values as 0/1."""
    x = b.v(input)
    if x.dtype != DType.bool_:
        x = b.op("Cast", x, to=DType.bool_)
    flags = b.op("Cast", x, to=DType.int32)
    axes = None if dim is None else (tuple(dim) if isinstance(dim, (tuple, list)) else (dim,))
    op_type = "ReduceMin" if b.current_key == "all" else "ReduceMax"
    reduced = b.op(op_type, flags, axes=axes, keepdims=bool(keepdim))
    return b.op("Cast", reduced, to=DType.bool_)


@handles("cumsum")
def cumsum(b, input, dim, *, dtype=None):
    """Running sum along `dim`; integral inputs sum in int64, as torch does."""
    x = b.v(input)
    target = b.dtype(dtype) if dtype is not None else None
    if target is None and x.dtype in _INTEGRAL:
        target = DType.int64
    if target is not None and target != x.dtype:
        x = b.op("Cast", x, to=target)
    return b.op("CumSum", x, axis=int(dim))


@handles("gather")
def gather(b, input, dim, index, *, sparse_grad=False):
    """torch.gather is ONNX GatherElements."""
    return b.op("GatherElements", b.v(input), b.v(index), axis=int(dim))
