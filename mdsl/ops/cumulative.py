"""Running totals along an axis (ONNX CumSum).

ONNX passes the axis as a tensor input; mdsl holds it as the `axis` attribute so shape
inference at build time sees it.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axis


@op_proto(
    "CumSum",
    inputs={"x": "numeric"},
    outputs={"y": "numeric"},
    attrs={
        "axis": Attr(int),
        "exclusive": Attr(bool, default=False),
        "reverse": Attr(bool, default=False),
    },
    category="opaque",
)
def _cumsum(x, *, axis, exclusive, reverse):
    """Running sum along `axis`; `exclusive` leaves out the element itself, `reverse` sums
    from the end (ONNX CumSum)."""
    check(x.rank >= 1, "CumSum needs an input of rank >= 1")
    normalize_axis(axis, x.rank)
    return TensorType(x.shape, x.dtype, x.format)


def cumsum(x, axis: int, *, exclusive: bool = False, reverse: bool = False, name=None):
    """Running sum of `x` along `axis` (ONNX CumSum; torch.cumsum / numpy.cumsum when
    `exclusive` and `reverse` are off).

    `axis` is an attribute, not ONNX's tensor input, so build-time shape inference sees it.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.cumsum(g.input("x", (4,)), 0, exclusive=True), "y")
    >>> mdsl.interpret(g, {"x": np.array([1, 2, 3, 4], np.float32)})["y"]
    array([0., 1., 3., 6.], dtype=float32)
    """
    return _cumsum(x, axis=axis, exclusive=exclusive, reverse=reverse, name=name)


def _cumsum_ref(x, *, axis, exclusive, reverse):
    axis %= x.ndim
    wide = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x
    if reverse:
        wide = np.flip(wide, axis)
    total = np.cumsum(wide, axis=axis)
    if exclusive:
        zeros = np.zeros_like(np.take(total, [0], axis=axis))
        total = np.concatenate([zeros, np.delete(total, -1, axis=axis)], axis=axis)
    if reverse:
        total = np.flip(total, axis)
    return np.ascontiguousarray(total).astype(x.dtype)


register_op_impl("CumSum", _cumsum_ref)
