"""Resize (ONNX Resize): nearest, (multi)linear and cubic interpolation over any axes.

ONNX passes `scales` and `sizes` as tensor inputs; mdsl holds them as attributes so shape
inference at build time sees them (the ONNX importer folds constant inputs into them).
Not supported: the `roi` input with "tf_crop_and_resize", `antialias` and
`keep_aspect_ratio_policy` (an importer meeting them reports the op as unsupported).

Interpolation is separable, so the reference resizes one axis at a time: each output
coordinate maps back to a fractional input coordinate (`source_coordinates`), which picks
neighbours and weights along that axis.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np

from mdsl.ir.errors import DTypeError
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axes, require_static

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@op_proto(
    "Resize",
    inputs={"X": "numeric"},
    outputs={"Y": "numeric"},
    attrs={
        "scales": Attr([float], default=None),
        "sizes": Attr([int], default=None),
        "axes": Attr([int], default=None),
        "mode": Attr(str, default="nearest", choices=MODES),
        "coordinate_transformation_mode": Attr(str, default="half_pixel", choices=COORDINATE_MODES),
        "nearest_mode": Attr(str, default="round_prefer_floor", choices=NEAREST_MODES),
        "cubic_coeff_a": Attr(float, default=-0.75),
        "exclude_outside": Attr(bool, default=False),
    },
    category="opaque",
)
def _resize(x, *, scales, sizes, axes, mode, **_interpolation):
    """Resize `x` over `axes` to `sizes`, or by `scales` (output dim = floor(dim * scale)),
    ONNX Resize."""
    if mode != "nearest" and not x.dtype.is_float:
        raise DTypeError(f"{mode} interpolation needs a float input, got {x.dtype}")
    check((scales is None) != (sizes is None), "Resize takes exactly one of `scales` and `sizes`")
    axes = tuple(range(x.rank)) if axes is None else normalize_axes(axes, x.rank)
    given = scales if scales is not None else sizes
    check(
        len(given) == len(axes),
        f"{'scales' if scales is not None else 'sizes'} has {len(given)} values "
        f"for {len(axes)} resized axes",
    )
    shape = list(x.shape)
    if sizes is not None:
        require_static(sizes, "sizes")
        check(all(s >= 1 for s in sizes), f"sizes {tuple(sizes)} must be >= 1")
    for i, a in enumerate(axes):
        shape[a] = sizes[i] if sizes is not None else scaled_dim(x.shape[a], scales[i], a)
    return TensorType(tuple(shape), x.dtype, x.format)


def scaled_dim(dim, scale: float, axis: int):
    """floor(dim * scale), also for a symbolic dim when scale is a simple fraction."""
    check(scale > 0, f"scale {scale} of axis {axis} must be > 0")
    if isinstance(dim, int):
        out = math.floor(dim * scale)
        check(out >= 1 or dim == 0, f"scale {scale} shrinks axis {axis} ({dim}) to nothing")
        return out
    exact = Fraction(scale)
    check(
        exact.denominator <= 1024,
        f"scale {scale} of symbolic axis {axis} ({dim}) is not a simple fraction; "
        "give `sizes` or a scale like 2, 0.5 or 1.5",
    )
    return (dim * exact.numerator) // exact.denominator


def resize(
    x,
    scales=None,
    sizes=None,
    *,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
    axes=None,
    name: str | None = None,
) -> Tensor:
    """Resize `x` (ONNX Resize) by `scales` or to `sizes`, one value per axis in `axes`
    (all axes when None, so NCHW images take (1, 1, sh, sw)).

    `mode`: "nearest", "linear" (bilinear on 2 axes) or "cubic". Matching
    torch.nn.functional.interpolate: mode "nearest" = nearest_mode "floor" with
    coordinate_transformation_mode "asymmetric"; "nearest-exact" = "round_prefer_ceil" with
    "half_pixel"; "bilinear"/"bicubic" with align_corners=False = "half_pixel", with
    align_corners=True = "align_corners".

    `scales` and `sizes` are attributes, not ONNX's tensor inputs, so build-time shape
    inference sees them.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 3, "H", 20), format="NCHW")
    ...     y = mdsl.ops.resize(x, scales=(1, 1, 2, 0.5), mode="linear")
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 3, Dim('2*H'), 10)
    """
    return _resize(
        x,
        scales=scales,
        sizes=sizes,
        axes=axes,
        mode=mode,
        coordinate_transformation_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        name=name,
    )


def source_coordinates(mode: str, in_len: int, out_len: int, scale: float) -> np.ndarray:
    """The fractional input coordinate of each output index along one axis."""
    y = np.arange(out_len, dtype=np.float64)
    if mode == "asymmetric":
        return y / scale
    if mode == "align_corners":
        return np.zeros_like(y) if out_len == 1 else y * (in_len - 1) / (out_len - 1)
    if mode == "pytorch_half_pixel" and out_len == 1:
        return np.zeros_like(y)
    x = (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        x += in_len / 2 * (1 - adjustment)
    return x


def _nearest_index(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    rounded = {
        "round_prefer_floor": lambda: np.ceil(x - 0.5),
        "round_prefer_ceil": lambda: np.floor(x + 0.5),
        "floor": lambda: np.floor(x),
        "ceil": lambda: np.ceil(x),
    }[nearest_mode]()
    return rounded.astype(np.int64)


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic kernel at distances 1+t, t, 1-t, 2-t (neighbours floor-1 .. floor+2)."""

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(1 + t), near(t), near(1 - t), far(2 - t)])


def _neighbours_and_weights(x, in_len, mode, nearest_mode, cubic_coeff_a, exclude_outside):
    """(indices, weights), each (taps, out_len): out = sum over taps of w * data[idx]."""
    if mode == "nearest":
        idx = _nearest_index(x, nearest_mode)[None]
        weights = np.ones_like(idx, dtype=np.float64)
    else:
        base = np.floor(x)
        t = x - base
        if mode == "linear":
            idx = base[None] + np.arange(2)[:, None]
            weights = np.stack([1 - t, t])
        else:
            idx = base[None] + np.arange(-1, 3)[:, None]
            weights = _cubic_weights(t, cubic_coeff_a)
        idx = idx.astype(np.int64)
    if exclude_outside:
        weights = np.where((idx < 0) | (idx >= in_len), 0.0, weights)
        weights = weights / weights.sum(axis=0, keepdims=True)
    return np.clip(idx, 0, in_len - 1), weights


def resized_axes(shape, *, scales, sizes, axes) -> list[tuple[int, int, float]]:
    """(axis, output length, scale) of each axis Resize resizes in an input of `shape`."""
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    out = []
    for i, a in enumerate(axes):
        in_len = shape[a]
        if sizes is not None:
            out.append((a, sizes[i], sizes[i] / in_len))
        else:
            out.append((a, math.floor(in_len * scales[i]), scales[i]))
    return out


def axis_taps(attrs: dict, in_len: int, out_len: int, scale: float):
    """(indices, weights), each (taps, out_len), of one resized axis: output position i is
    the sum over taps t of weights[t, i] * input[indices[t, i]] (one tap of weight 1 for
    nearest)."""
    x = source_coordinates(attrs["coordinate_transformation_mode"], in_len, out_len, scale)
    return _neighbours_and_weights(
        x,
        in_len,
        attrs["mode"],
        attrs["nearest_mode"],
        attrs["cubic_coeff_a"],
        attrs["exclude_outside"],
    )


def _resize_axis(data, axis, out_len, scale, attrs):
    idx, weights = axis_taps(attrs, data.shape[axis], out_len, scale)
    if attrs["mode"] == "nearest":
        return np.take(data, idx[0], axis=axis)
    bcast = [1] * data.ndim
    bcast[axis] = out_len
    total = 0.0
    for tap_idx, tap_w in zip(idx, weights):
        total = total + np.take(data, tap_idx, axis=axis) * tap_w.reshape(bcast)
    return total


def _resize_ref(x, *, scales, sizes, axes, **attrs):
    work = x if attrs["mode"] == "nearest" else x.astype(np.float64)
    for a, out_len, scale in resized_axes(x.shape, scales=scales, sizes=sizes, axes=axes):
        work = _resize_axis(work, a, out_len, scale, attrs)
    return np.asarray(work).astype(x.dtype)


register_op_impl("Resize", _resize_ref)
# the C form over symbolic dims (not a "c" binding: static Resize has generated kernels)
C_SOURCE = Path(__file__).with_name("resizing.c").read_text()
