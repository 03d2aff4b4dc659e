"""Reductions over axes (ONNX ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceL1, ReduceL2, ReduceLogSumExp, ReduceSumSquare) and the index of the extreme value
(ArgMax, ArgMin).

ONNX (opset 18) passes a ReduceX's axes as a tensor input; mdsl holds them as the `axes`
attribute so shape inference at build time sees them (None reduces over every axis).
"""

from __future__ import annotations

import math

import numpy as np

from mdsl import expr as E
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.reductions import (
    Reduction,
    axes_attr,
    axis_attr,
    l2_norm_rule,
    log_sum_exp_rule,
    mean,
    reduce_rule,
)
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axes, normalize_axis


def reduced_type(x: TensorType, axes, keepdims: bool) -> TensorType:
    """The type of reducing `x` over `axes` (None: all axes)."""
    axes = range(x.rank) if axes is None else normalize_axes(axes, x.rank)
    shape = (
        [1 if i in axes else d for i, d in enumerate(x.shape)]
        if keepdims
        else [d for i, d in enumerate(x.shape) if i not in axes]
    )
    return TensorType(tuple(shape), x.dtype)


def _reduction(op_type: str, reference, doc: str, row, dtypes="numeric"):
    def infer(x, *, axes, keepdims):
        return reduced_type(x, axes, keepdims)

    infer.__doc__ = doc
    builder = op_proto(
        op_type,
        inputs={"x": dtypes},
        outputs={"y": dtypes},
        attrs={"axes": Attr([int], default=None), "keepdims": Attr(bool, default=True)},
        category="reduction",
        reduction=Reduction(axes_attr, row),
    )(infer)

    def run(x, *, axes, keepdims):
        axis = None if axes is None else tuple(axes)
        return np.asarray(reference(x, axis=axis, keepdims=keepdims)).astype(x.dtype)

    register_op_impl(op_type, run)
    return builder


def _extreme(fn, float_identity: float, int_limit: str):
    """np.max / np.min with ONNX's result over an empty axis: the identity (-inf / inf,
    or the integer type's limit), as every compiled target computes it."""

    def reduce(x, axis, keepdims):
        if x.dtype.kind in "iub":
            identity = getattr(
                np.iinfo(x.dtype) if x.dtype.kind != "b" else np.iinfo(np.uint8), int_limit
            )
        else:
            identity = float_identity
        return fn(x, axis=axis, keepdims=keepdims, initial=identity)

    return reduce


def _mean(x, axis, keepdims):
    count = x.size if axis is None else math.prod(x.shape[a] for a in axis)
    if count == 0:  # 0 / 0: NaN, which an integer result saturates to 0
        shape = np.sum(x, axis=axis, keepdims=keepdims).shape
        return np.full(shape, np.nan if x.dtype.kind == "f" else 0)
    return np.mean(x, axis=axis, keepdims=keepdims)


reduce_sum = _reduction("ReduceSum", np.sum, "Sum over `axes` (all when None).", reduce_rule("sum"))
reduce_mean = _reduction(
    "ReduceMean",
    _mean,
    "Mean over `axes` (all when None); NaN over an empty axis.",
    reduce_rule("sum", post=mean),
)
reduce_max = _reduction(
    "ReduceMax",
    _extreme(np.max, -np.inf, "min"),
    "Maximum over `axes` (all when None); -inf (an integer type's minimum) over an empty axis.",
    reduce_rule("max"),
)
reduce_min = _reduction(
    "ReduceMin",
    _extreme(np.min, np.inf, "max"),
    "Minimum over `axes` (all when None); inf (an integer type's maximum) over an empty axis.",
    reduce_rule("min"),
)


def _wide(x: np.ndarray) -> np.ndarray:
    """Floats computed in float64 so the reference is more exact than any backend."""
    return x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x


def _log_sum_exp(x, axis, keepdims):
    x = _wide(x)
    peak = np.max(x, axis=axis, keepdims=True, initial=-np.inf)  # -inf over an empty axis
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):  # log(0) = -inf: ONNX's value for an empty axis
        total = np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True)) + peak
    return total if keepdims else np.squeeze(total, axis=axis)


_EXAMPLE = """

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.{builder}(g.input("x", ("N", 8, 4)), axes=[1], keepdims=False)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 4)
"""

reduce_prod = _reduction(
    "ReduceProd",
    lambda x, axis, keepdims: np.prod(_wide(x), axis=axis, keepdims=keepdims),
    "Product over `axes` (all when None)." + _EXAMPLE.format(builder="reduce_prod"),
    reduce_rule("prod"),
)
reduce_l1 = _reduction(
    "ReduceL1",
    lambda x, axis, keepdims: np.sum(np.abs(_wide(x)), axis=axis, keepdims=keepdims),
    "Sum of absolute values over `axes` (all when None)." + _EXAMPLE.format(builder="reduce_l1"),
    reduce_rule("sum", pre=E.abs),
)
reduce_l2 = _reduction(
    "ReduceL2",
    lambda x, axis, keepdims: np.sqrt(np.sum(np.square(_wide(x)), axis=axis, keepdims=keepdims)),
    "Euclidean norm over `axes` (all when None)." + _EXAMPLE.format(builder="reduce_l2"),
    l2_norm_rule,
    dtypes="float",
)
reduce_log_sum_exp = _reduction(
    "ReduceLogSumExp",
    _log_sum_exp,
    "log(sum(exp(x))) over `axes` (all when None), computed without overflow."
    + _EXAMPLE.format(builder="reduce_log_sum_exp"),
    log_sum_exp_rule,
    dtypes="float",
)
reduce_sum_square = _reduction(
    "ReduceSumSquare",
    lambda x, axis, keepdims: np.sum(np.square(_wide(x)), axis=axis, keepdims=keepdims),
    "Sum of squares over `axes` (all when None)." + _EXAMPLE.format(builder="reduce_sum_square"),
    reduce_rule("sum", pre=lambda x: x * x),
)


def _arg_reduction(op_type: str, pick, doc: str):
    def infer(x, *, axis, keepdims, select_last_index):
        check(x.rank >= 1, f"{op_type} needs an input of rank >= 1")
        axis = normalize_axis(axis, x.rank)
        return reduced_type(x, [axis], keepdims).with_dtype("int64")

    infer.__doc__ = doc
    builder = op_proto(
        op_type,
        inputs={"data": "numeric"},
        outputs={"reduced": ["int64"]},
        attrs={
            "axis": Attr(int, default=0),
            "keepdims": Attr(bool, default=True),
            "select_last_index": Attr(bool, default=False),
        },
        category="reduction",
        reduction=Reduction(axis_attr),
    )(infer)

    def run(x, *, axis, keepdims, select_last_index):
        axis %= x.ndim
        if select_last_index:
            index = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
        else:
            index = pick(x, axis=axis)
        index = index.astype(np.int64)
        return np.expand_dims(index, axis) if keepdims else index

    register_op_impl(op_type, run)
    return builder


_ARG_EXAMPLE = """ Ties give the first
    index, or the last with `select_last_index` (ONNX {op}); the result is int64.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.{builder}(g.input("logits", ("N", 10)), axis=-1, keepdims=False)
    ...     g.output(y, "y")
    >>> y.shape, y.dtype
    ((Dim('N'),), mdsl.int64)
"""

argmax = _arg_reduction(
    "ArgMax",
    np.argmax,
    "Index of the largest element along `axis`."
    + _ARG_EXAMPLE.format(op="ArgMax", builder="argmax"),
)
argmin = _arg_reduction(
    "ArgMin",
    np.argmin,
    "Index of the smallest element along `axis`."
    + _ARG_EXAMPLE.format(op="ArgMin", builder="argmin"),
)
