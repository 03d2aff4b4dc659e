"""Sliding-window geometry shared by Conv and the pooling ops (ONNX output-size formulas).

Input sizes may be symbolic; output sizes then come out as `Dim` expressions such as
`(H-1)//2+1`. The numpy references use the same `Window` with concrete sizes, so shape
inference and execution cannot disagree.

>>> w = make_window((3, 3), strides=(2, 2), dilations=None, pads=(1, 1, 1, 1))
>>> output_shape(w, (Dim("H"), 224))
(Dim('(H+1)//2'), 112)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.errors import GraphError
from mdsl.ops.registry import check

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_SAME = ("SAME_UPPER", "SAME_LOWER")


@dataclass(frozen=True, slots=True)
class Window:
    """Per-spatial-axis kernel, strides, dilations and explicit pads (ONNX order: every
    axis's begin pad, then every axis's end pad)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    auto_pad: str = "NOTSET"
    ceil_mode: bool = False

    @property
    def rank(self) -> int:
        return len(self.kernel)

    def extent(self, axis: int) -> int:
        """How many input positions one window spans along `axis` (dilation included)."""
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1


def make_window(kernel, strides, dilations, pads, auto_pad="NOTSET", ceil_mode=False) -> Window:
    """A validated Window; None strides/dilations mean 1, None pads mean 0 (ONNX)."""
    n = len(kernel)
    strides = _per_axis("strides", strides, n, 1)
    dilations = _per_axis("dilations", dilations, n, 1)
    if auto_pad != "NOTSET" and pads is not None and any(pads):
        raise GraphError(f"pads {tuple(pads)} cannot be combined with auto_pad={auto_pad}")
    pads = _per_axis("pads", pads, 2 * n, 0)
    for what, values, least in (
        ("kernel_shape", kernel, 1),
        ("strides", strides, 1),
        ("dilations", dilations, 1),
        ("pads", pads, 0),
    ):
        for v in values:
            check(not isinstance(v, Dim), f"{what} must be static ints, got symbolic {v}")
            check(v >= least, f"{what} {tuple(values)} must all be >= {least}")
    return Window(tuple(kernel), strides, dilations, pads, auto_pad, bool(ceil_mode))


def window_of(attrs: dict, kernel=None) -> Window:
    """The Window of a Conv or pooling node from its attrs (`kernel`: a Conv's kernel
    size, read from its weights; pools declare `kernel_shape`). The op's shape rule,
    its numpy reference and the code generators all take the window from here.

    >>> window_of({"kernel_shape": (2, 2), "strides": (2, 2), "dilations": None,
    ...            "pads": None, "auto_pad": "NOTSET", "ceil_mode": False}).pads
    (0, 0, 0, 0)
    """
    return make_window(
        attrs["kernel_shape"] if kernel is None else kernel,
        attrs["strides"],
        attrs["dilations"],
        attrs["pads"],
        attrs["auto_pad"],
        attrs.get("ceil_mode", False),
    )


def _per_axis(what: str, values, n: int, default: int) -> tuple:
    if values is None:
        return (default,) * n
    check(
        len(values) == n,
        f"{what} {tuple(values)} needs {n} entries for {n // (2 if what == 'pads' else 1)} "
        "spatial axes",
    )
    return tuple(values)


def output_shape(window: Window, in_dims) -> tuple:
    """The spatial output sizes for spatial input sizes `in_dims` (ints or Dims)."""
    n = window.rank
    return tuple(
        _axis_output(window, i, in_dims[i], window.pads[i], window.pads[n + i]) for i in range(n)
    )


def _axis_output(window: Window, axis: int, size, pad_begin: int, pad_end: int):
    stride, extent = window.strides[axis], window.extent(axis)
    if window.auto_pad in _SAME:
        return (size + stride - 1) // stride
    if window.auto_pad == "VALID":
        pad_begin = pad_end = 0
    span = size + pad_begin + pad_end - extent
    ceil = window.ceil_mode and window.auto_pad == "NOTSET"
    if isinstance(span, int):
        # with ceil_mode a window may be larger than the input: one partial window
        # (ONNX Runtime and PyTorch agree; HF EfficientNet pools 7x7 with a 2560 window)
        check(
            span >= 0 or (ceil and span + stride > 0 and size > 0),
            f"spatial axis {axis}: input size {size} (padded {size + pad_begin + pad_end}) "
            f"is smaller than the window extent {extent}",
        )
    if not ceil:
        return _windows_starting_at_or_before(span, stride)
    # ceil_mode: a last, partial window counts, unless it would start in the end padding
    # (ONNX, PyTorch). Which bound wins is decided by constants alone, so it holds for
    # symbolic sizes too.
    if stride + pad_end - extent >= 0:
        return _windows_starting_at_or_before(size + pad_begin - 1, stride)
    return _windows_starting_at_or_before(span + stride - 1, stride)


def _windows_starting_at_or_before(last_start, stride: int):
    """How many windows start at 0, stride, 2*stride, ... <= last_start: last_start // stride
    + 1, written as one floor division so symbolic sizes print simply (`H//2`)."""
    return (last_start + stride) // stride


@dataclass(frozen=True, slots=True)
class Padding:
    """Concrete padding of one input: explicit (or SAME) pads per axis, plus the
    `overhang` a ceil_mode window reaches past them (never counted as padding)."""

    out: tuple[int, ...]
    begins: tuple[int, ...]
    ends: tuple[int, ...]
    overhang: tuple[int, ...]


def concrete_padding(window: Window, in_dims: tuple[int, ...]) -> Padding:
    """Pads and output sizes for a concrete input (resolves SAME_UPPER/SAME_LOWER)."""
    out = output_shape(window, in_dims)
    n = window.rank
    begins, ends, overhang = [], [], []
    for i in range(n):
        stride, extent = window.strides[i], window.extent(i)
        needed = (out[i] - 1) * stride + extent
        if window.auto_pad in _SAME:
            total = max(0, needed - in_dims[i])
            begin = total // 2 if window.auto_pad == "SAME_UPPER" else total - total // 2
            end = total - begin
        elif window.auto_pad == "VALID":
            begin = end = 0
        else:
            begin, end = window.pads[i], window.pads[n + i]
        begins.append(begin)
        ends.append(end)
        overhang.append(max(0, needed - (in_dims[i] + begin + end)))
    return Padding(out, tuple(begins), tuple(ends), tuple(overhang))


def pad_spatial(x: np.ndarray, begins, ends, value) -> np.ndarray:
    """`x` padded with `value` on its last len(begins) axes."""
    lead = [(0, 0)] * (x.ndim - len(begins))
    return np.pad(x, lead + list(zip(begins, ends)), constant_values=value)


def window_values(padded: np.ndarray, window: Window, out: tuple[int, ...]) -> np.ndarray:
    """(..., K, *out): for each of the K = prod(kernel) kernel offsets, the value every
    output position sees in `padded` (whose last `window.rank` axes are spatial)."""
    views = []
    for offset in itertools.product(*(range(k) for k in window.kernel)):
        index = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offset, window.dilations, out, window.strides)
        )
        views.append(padded[(..., *index)])
    return np.stack(views, axis=-(window.rank + 1))


def padded_windows(x: np.ndarray, window: Window, value) -> tuple[np.ndarray, Padding]:
    """`window_values` of `x` padded (explicit pads and ceil_mode overhang) with `value`."""
    padding = concrete_padding(window, x.shape[-window.rank :])
    ends = tuple(e + o for e, o in zip(padding.ends, padding.overhang))
    padded = pad_spatial(x, padding.begins, ends, value)
    return window_values(padded, window, padding.out), padding
