"""Padding a tensor's borders (ONNX Pad): constant, reflect, edge and wrap modes.

ONNX passes `pads`, `constant_value` and `axes` as tensor inputs; mdsl holds them as
attributes so shape inference at build time sees them (the ONNX importer folds constant
inputs into these attributes).
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import DTypeError
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axes, require_static

PAD_MODES = ("constant", "reflect", "edge", "wrap")


@op_proto(
    "Pad",
    inputs={"data": "any"},
    outputs={"output": "any"},
    attrs={
        "pads": Attr([int]),
        "mode": Attr(str, default="constant", choices=PAD_MODES),
        "constant_value": Attr(float, default=0.0),
        "axes": Attr([int], default=None),
    },
    category="data_movement",
)
def _pad(x, *, pads, mode, constant_value, axes):
    """Pad `x` by `pads` = [x1_begin, x2_begin, ..., x1_end, x2_end, ...] over `axes`
    (all axes when None); negative pads crop (ONNX Pad)."""
    axes = tuple(range(x.rank)) if axes is None else normalize_axes(axes, x.rank)
    check(
        len(pads) == 2 * len(axes),
        f"pads has {len(pads)} values; padding {len(axes)} axes needs {2 * len(axes)} "
        "(all begins, then all ends)",
    )
    if mode != "constant":  # constant padding takes sizes known at run time (value dims)
        require_static(pads, "pads")
    _check_constant_fits(x.dtype, constant_value)
    shape = list(x.shape)
    for a, (begin, end) in zip(axes, _pairs(pads)):
        shape[a] = shape[a] + begin + end
        check(not (isinstance(shape[a], int) and shape[a] < 0), f"pads crop axis {a} below 0")
        if mode in ("reflect", "edge", "wrap") and (begin > 0 or end > 0):
            _check_border_source(mode, a, x.shape[a], begin, end)
    return TensorType(tuple(shape), x.dtype, x.format)


def _pairs(pads):
    half = len(pads) // 2
    return list(zip(pads[:half], pads[half:]))


def _check_constant_fits(dtype: DType, value: float) -> None:
    if not dtype.is_float and not float(value).is_integer():
        raise DTypeError(f"constant_value {value} cannot pad a {dtype} tensor without rounding")


def _check_border_source(mode: str, axis: int, dim, begin: int, end: int) -> None:
    if not isinstance(dim, int):
        return  # checked when the kernel runs
    check(dim > 0, f"{mode} padding needs a non-empty axis {axis}")
    if mode == "reflect":
        check(
            max(begin, end) < dim,
            f"reflect pads ({begin}, {end}) on axis {axis} must be smaller than its size {dim}",
        )


def pad(
    x, pads, constant_value: float = 0.0, axes=None, *, mode: str = "constant", name=None
) -> Tensor:
    """Pad `x` (ONNX Pad). `pads` lists all begins then all ends, ONNX order:
    [x1_begin, x2_begin, ..., x1_end, x2_end, ...]; modes "constant", "reflect", "edge",
    "wrap"; negative pads crop.

    `pads`, `constant_value` and `axes` are attributes, not ONNX's tensor inputs, so
    build-time shape inference sees them.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.pad(g.input("x", ("N", 3, 8, 8)), [0, 0, 1, 1, 0, 0, 1, 1])
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 3, 10, 10)
    """
    return _pad(x, pads=pads, mode=mode, constant_value=constant_value, axes=axes, name=name)


def _pad_ref(x, *, pads, mode, constant_value, axes):
    axes = range(x.ndim) if axes is None else [a % x.ndim for a in axes]
    crop = [slice(None)] * x.ndim
    widths = [(0, 0)] * x.ndim
    for a, (begin, end) in zip(axes, _pairs(pads)):
        crop[a] = slice(max(-begin, 0), x.shape[a] - max(-end, 0))
        widths[a] = (max(begin, 0), max(end, 0))
    x = x[tuple(crop)]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.array(constant_value, x.dtype))
    return np.pad(x, widths, mode=mode)


register_op_impl("Pad", _pad_ref)
