"""Running totals and products along an axis (ONNX CumSum, CumProd).

ONNX passes the axis as a tensor input; mdsl holds it as the `axis` attribute so shape
inference at build time sees it.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axis


def _scan_infer(op_type: str):
    def infer(x, *, axis, exclusive, reverse):
        check(x.rank >= 1, f"{op_type} needs an input of rank >= 1")
        normalize_axis(axis, x.rank)
        return TensorType(x.shape, x.dtype, x.format)

    infer.__name__ = f"_{op_type.lower()}"
    infer.__doc__ = (
        f"Running {'sum' if op_type == 'CumSum' else 'product'} along `axis`; `exclusive` "
        f"leaves out the element itself, `reverse` runs from the end (ONNX {op_type})."
    )
    return op_proto(
        op_type,
        inputs={"x": "numeric"},
        outputs={"y": "numeric"},
        attrs={
            "axis": Attr(int),
            "exclusive": Attr(bool, default=False),
            "reverse": Attr(bool, default=False),
        },
        category="opaque",
    )(infer)


_cumsum = _scan_infer("CumSum")
_cumprod = _scan_infer("CumProd")


def cumsum(x, axis: int, *, exclusive: bool = False, reverse: bool = False, name=None) -> Tensor:
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


def cumprod(x, axis: int, *, exclusive: bool = False, reverse: bool = False, name=None) -> Tensor:
    """Running product of `x` along `axis` (ONNX CumProd; numpy.cumprod when `exclusive`
    and `reverse` are off). An exclusive product starts at 1.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.cumprod(g.input("x", (4,)), 0), "y")
    >>> mdsl.interpret(g, {"x": np.array([1, 2, 3, 4], np.float32)})["y"]
    array([ 1.,  2.,  6., 24.], dtype=float32)
    """
    return _cumprod(x, axis=axis, exclusive=exclusive, reverse=reverse, name=name)


def _running(x, *, axis, exclusive, reverse, product=False):
    axis %= x.ndim
    wide = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x
    if reverse:
        wide = np.flip(wide, axis)
    total = (np.cumprod if product else np.cumsum)(wide, axis=axis)
    if exclusive:
        start = (np.ones_like if product else np.zeros_like)(np.take(total, [0], axis=axis))
        total = np.concatenate([start, np.delete(total, -1, axis=axis)], axis=axis)
    if reverse:
        total = np.flip(total, axis)
    return np.ascontiguousarray(total).astype(x.dtype)


register_op_impl("CumSum", _running)
register_op_impl("CumProd", lambda x, **attrs: _running(x, **attrs, product=True))
