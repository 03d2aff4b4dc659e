"""Reductions over axes (ONNX ReduceSum, ReduceMean, ReduceMax, ReduceMin)."""

from __future__ import annotations

import numpy as np

from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr
from mdsl.ops.shape_rules import normalize_axes


def reduced_type(x: TensorType, axes, keepdims: bool) -> TensorType:
    """The type of reducing `x` over `axes` (None: all axes)."""
    axes = range(x.rank) if axes is None else normalize_axes(axes, x.rank)
    shape = (
        [1 if i in axes else d for i, d in enumerate(x.shape)]
        if keepdims
        else [d for i, d in enumerate(x.shape) if i not in axes]
    )
    return TensorType(tuple(shape), x.dtype)


def _reduction(op_type: str, reference, doc: str):
    def infer(x, *, axes, keepdims):
        return reduced_type(x, axes, keepdims)

    infer.__doc__ = doc
    builder = op_proto(
        op_type,
        inputs={"x": "numeric"},
        outputs={"y": "numeric"},
        attrs={"axes": Attr([int], default=None), "keepdims": Attr(bool, default=True)},
        category="reduction",
    )(infer)

    def run(x, *, axes, keepdims):
        axis = None if axes is None else tuple(axes)
        return np.asarray(reference(x, axis=axis, keepdims=keepdims)).astype(x.dtype)

    register_op_impl(op_type, run)
    return builder


reduce_sum = _reduction("ReduceSum", np.sum, "Sum over `axes` (all when None).")
reduce_mean = _reduction("ReduceMean", np.mean, "Mean over `axes` (all when None).")
reduce_max = _reduction("ReduceMax", np.max, "Maximum over `axes` (all when None).")
reduce_min = _reduction("ReduceMin", np.min, "Minimum over `axes` (all when None).")
