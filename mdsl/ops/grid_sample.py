"""Sampling an image at the points of a grid (ONNX GridSample, torch's grid_sample), in 1-D
to 3-D, with nearest, linear and cubic interpolation and zeros, border and reflection
padding.

x is (N, C, D1, ..., Dr) and grid is (N, H1, ..., Hr', r): grid[n, h...] holds the point
to sample, normalized to [-1, 1] and in reverse axis order (its first value indexes the
last axis, as (x, y) does for an image). The output is (N, C, H1, ..., Hr').

Each axis is handled alone, so the interpolation is separable: a point's coordinate
becomes taps (indices) with weights per axis, and the result sums the products of the
weights over every combination of taps. The steps follow ONNX's reference (and PyTorch's
GridSampler.h): denormalize (align_corners: -1 and 1 are the centers of the corner
pixels; else their outer edges), for nearest round half to even, move a coordinate
outside the image inside (border: clamp, except for cubic; reflection: mirror at the
edges), then read each tap with the padding rule (zeros: 0 outside). Cubic with border
padding follows ONNX Runtime and PyTorch, which clamp only the taps; ONNX's reference
also clamps the point first (no ONNX test case has that combination). The "c" binding (`grid_sample.c`)
runs the same steps as a compiled loop.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import unify_dims

# "bilinear" and "bicubic" are opset 16's (and torch's) names of linear and cubic
MODES = ("linear", "nearest", "cubic", "bilinear", "bicubic")
PADDING_MODES = ("zeros", "border", "reflection")
_CUBIC_A = -0.75  # Keys' cubic convolution, as ONNX and PyTorch use


@op_proto(
    "GridSample",
    inputs={"x": "float", "grid": "float"},
    outputs={"y": "float"},
    attrs={
        "mode": Attr(str, default="linear", choices=MODES),
        "padding_mode": Attr(str, default="zeros", choices=PADDING_MODES),
        "align_corners": Attr(int, default=0, choices=(0, 1)),
    },
    category="opaque",
)
def grid_sample(x, grid, *, mode, padding_mode, align_corners):
    """x (N, C, D1..Dr) sampled at the points of grid (N, H1..Hr', r), normalized to
    [-1, 1] in reverse axis order (ONNX GridSample; torch.nn.functional.grid_sample).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x, grid = g.input("x", (1, 1, 2, 2)), g.input("grid", (1, 1, 2, 2))
    ...     g.output(mdsl.ops.grid_sample(x, grid, align_corners=1), "y")
    >>> image = np.array([[[[0, 1], [2, 3]]]], np.float32)
    >>> points = np.array([[[[-1, -1], [0, 0]]]], np.float32)   # a corner, the center
    >>> mdsl.interpret(g, {"x": image, "grid": points})["y"]
    array([[[[0. , 1.5]]]], dtype=float32)
    """
    rank = x.rank - 2
    check(1 <= rank <= 3, f"GridSample samples 1-D to 3-D images (N, C, D...), got x {x.shape}")
    check(
        grid.rank == x.rank and grid.shape[-1] == rank,
        f"GridSample grid must be (N, H..., {rank}) for x {x.shape}, got {grid.shape}",
    )
    n = unify_dims(x.shape[0], grid.shape[0], "GridSample batch (x dim 0, grid dim 0)")
    return TensorType((n, x.shape[1], *grid.shape[1:-1]), x.dtype)


def denormalized(g: np.ndarray, size: int, align_corners: int) -> np.ndarray:
    """Pixel coordinates of normalized ones along an axis of `size` pixels."""
    if align_corners:
        return (g + 1) / 2 * (size - 1)
    return ((g + 1) * size - 1) / 2


def reflected(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """`x` mirrored at `low` and `high` until it lies between them."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    out = x.copy()
    for distance, near, far, step in ((low - x, low, high, 1.0), (x - high, high, low, -1.0)):
        turns = np.floor(np.maximum(distance, 0) / span)
        rest = distance - turns * span
        mirrored = np.where(turns % 2 == 0, near + step * rest, far - step * rest)
        out = np.where(distance > 0, mirrored, out)
    return out


def _edges(size: int, align_corners: int) -> tuple[float, float]:
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Weights of the taps at -1, 0, 1, 2 for a fraction `t` in [0, 1)."""
    a = _CUBIC_A

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def axis_taps(coord, size: int, *, mode: str, padding_mode: str, align_corners: int):
    """[(index, weight)] of one axis: indices in range (clamped where a zero weight
    stands for a tap outside the image), float64 weights."""
    low, high = _edges(size, align_corners)
    if mode == "nearest":
        coord = np.rint(coord)  # before moving it inside, as ONNX does
    outside = (coord < low) | (coord > high)
    if padding_mode == "border" and mode != "cubic":  # cubic: its taps are clamped
        coord = np.where(outside, np.clip(coord, 0, size - 1), coord)
    elif padding_mode == "reflection":
        coord = np.where(outside, reflected(coord, low, high), coord)
    if mode == "nearest":
        base, offsets, weights = np.trunc(coord), (0,), [np.ones_like(coord)]
    else:
        base = np.floor(coord)
        t = coord - base
        if mode == "linear":
            offsets, weights = (0, 1), [1 - t, t]
        else:
            offsets, weights = (-1, 0, 1, 2), _cubic_weights(t)
    taps = []
    for offset, weight in zip(offsets, weights):
        index = base + offset
        if padding_mode == "zeros":
            inside = (index >= 0) & (index < size)
            weight = np.where(inside, weight, 0.0)
        elif padding_mode == "border":
            index = np.clip(index, 0, size - 1)
        else:
            index = np.trunc(reflected(index, low, high))
        taps.append((np.clip(index, 0, size - 1).astype(np.int64), weight))
    return taps


def _grid_sample_ref(x, grid, *, mode, padding_mode, align_corners):
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    n, c, *sizes = x.shape
    rank = len(sizes)
    points = grid.astype(np.float64)
    per_axis = [
        axis_taps(
            denormalized(points[..., rank - 1 - axis], size, align_corners),
            size,
            mode=mode,
            padding_mode=padding_mode,
            align_corners=align_corners,
        )
        for axis, size in enumerate(sizes)
    ]
    batch = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    wide = x.astype(np.float64)
    out = np.zeros((n, *grid.shape[1:-1], c))
    for combination in itertools.product(*per_axis):
        weight = np.prod([w for _, w in combination], axis=0)
        values = wide.transpose(0, *range(2, x.ndim), 1)[(batch, *(i for i, _ in combination))]
        out += weight[..., None] * values
    return np.moveaxis(out, -1, 1).astype(x.dtype)


register_op_impl("GridSample", _grid_sample_ref)

C_SOURCE = Path(__file__).with_name("grid_sample.c").read_text()
register_op_impl("GridSample", backend="c", source=C_SOURCE, symbol="grid_sample_nd")
