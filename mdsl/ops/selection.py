"""The k largest (or smallest) elements along an axis and their indices (ONNX TopK).

ONNX passes k as a tensor input; mdsl holds it as the `k` attribute so shape inference at
build time sees it. Equal values keep their order: the lower index comes first.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axis


@op_proto(
    "TopK",
    inputs={"X": "numeric"},
    outputs={"Values": "numeric", "Indices": ["int64"]},
    attrs={
        "k": Attr(int),
        "axis": Attr(int, default=-1),
        "largest": Attr(bool, default=True),
        "sorted": Attr(bool, default=True),
    },
    category="opaque",
)
def _topk(x, *, k, axis, largest, sorted):
    """(values, int64 indices) of the `k` largest (smallest unless `largest`) elements
    along `axis` (ONNX TopK)."""
    check(x.rank >= 1, "TopK needs an input of rank >= 1")
    axis = normalize_axis(axis, x.rank)
    dim = x.shape[axis]
    check(not isinstance(k, int) or k >= 0, f"k must be >= 0, got {k}")
    check(
        not (isinstance(dim, int) and isinstance(k, int)) or k <= dim,
        f"k = {k} is larger than axis {axis} ({dim})",
    )
    shape = (*x.shape[:axis], k, *x.shape[axis + 1 :])
    return TensorType(shape, x.dtype), TensorType(shape, "int64")


def topk(
    x, k: int, *, axis: int = -1, largest: bool = True, sorted: bool = True, name=None
) -> tuple[Tensor, ...]:
    """The `k` largest elements of `x` along `axis` and their int64 indices, in descending
    order (ascending with largest=False); ties keep the lower index first (ONNX TopK,
    torch.topk). With sorted=False the order is unspecified; this reference sorts anyway.

    `k` is an attribute, not ONNX's tensor input, so build-time shape inference sees it.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     values, indices = mdsl.ops.topk(g.input("logits", ("N", 100)), 5)
    ...     g.output(indices, "top5")
    >>> indices.shape, indices.dtype
    ((Dim('N'), 5), mdsl.int64)
    """
    return _topk(x, k=k, axis=axis, largest=largest, sorted=sorted, name=name)


def _stable_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Indices sorting `x` along `axis`, ties by ascending index, for any dtype (no
    negation, so unsigned and extreme ints are safe)."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    # ascending stable sort of the flipped axis, read backwards: descending values, and
    # within ties the original indices come out ascending
    flipped = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return x.shape[axis] - 1 - np.flip(flipped, axis)


def _topk_ref(x, *, k, axis, largest, sorted):
    axis %= x.ndim
    order = np.take(_stable_order(x, axis, largest), np.arange(k), axis=axis)
    return np.take_along_axis(x, order, axis=axis), order.astype(np.int64)


register_op_impl("TopK", _topk_ref)
