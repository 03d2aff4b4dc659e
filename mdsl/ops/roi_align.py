"""Pooling regions of interest to a fixed size by bilinear sampling (ONNX RoiAlign, the
pooling of Mask R-CNN heads; Caffe2's and ONNX Runtime's algorithm).

x is (N, C, H, W); rois is (R, 4) boxes (x1, y1, x2, y2) in input coordinates (scaled by
`spatial_scale`); batch_indices (R,) picks each box's image. Each box is split into
output_height x output_width bins; each bin samples a grid of sampling_ratio^2 points
(0: ceil(box size / bins) per axis) and pools them by their mean ("avg") or maximum
("max"; as ONNX Runtime computes it, of each point's largest weighted corner).

`coordinate_transformation_mode` "half_pixel" (opset 16's default) shifts the box by
-0.5 pixel; "output_half_pixel" (opset 10's behaviour) does not, and makes a box at
least one pixel wide and high. A sample more than a pixel outside the image counts 0.
The "c" binding (`roi_align.c`) runs the same steps as a compiled loop.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mdsl.ir.errors import ExecutionError
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import unify_dims

COORDINATE_MODES = ("half_pixel", "output_half_pixel")


@op_proto(
    "RoiAlign",
    inputs={"x": "float", "rois": "float", "batch_indices": ["int32", "int64"]},
    outputs={"y": "float"},
    attrs={
        "coordinate_transformation_mode": Attr(str, default="half_pixel", choices=COORDINATE_MODES),
        "mode": Attr(str, default="avg", choices=("avg", "max")),
        "output_height": Attr(int, default=1),
        "output_width": Attr(int, default=1),
        "sampling_ratio": Attr(int, default=0),
        "spatial_scale": Attr(float, default=1.0),
    },
    category="opaque",
)
def roi_align(
    x,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
):
    """Each box of `rois` (R, 4) in image `batch_indices[r]` of x (N, C, H, W), pooled to
    (output_height, output_width): the result is (R, C, output_height, output_width)
    (ONNX RoiAlign).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x, rois = g.input("x", (1, 1, 4, 4)), g.input("rois", (1, 4))
    ...     g.output(mdsl.ops.roi_align(x, rois, g.input("b", (1,), "int64")), "y")
    >>> image = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> box = np.array([[1, 1, 3, 3]], np.float32)   # the middle 2x2 pixels
    >>> mdsl.interpret(g, {"x": image, "rois": box, "b": np.array([0])})["y"]
    array([[[[7.5]]]], dtype=float32)
    """
    check(x.rank == 4, f"RoiAlign x must be (N, C, H, W), got {x.shape}")
    check(rois.rank == 2 and rois.shape[1] == 4, f"RoiAlign rois must be (R, 4), got {rois.shape}")
    check(
        batch_indices.rank == 1, f"RoiAlign batch_indices must be (R,), got {batch_indices.shape}"
    )
    check(rois.dtype == x.dtype, f"RoiAlign rois ({rois.dtype}) must have x's dtype ({x.dtype})")
    check(
        output_height > 0 and output_width > 0 and sampling_ratio >= 0,
        f"RoiAlign output_height/width must be positive and sampling_ratio >= 0, got "
        f"{output_height}, {output_width}, {sampling_ratio}",
    )
    r = unify_dims(
        rois.shape[0], batch_indices.shape[0], "RoiAlign box count (rois, batch_indices)"
    )
    return TensorType((r, x.shape[1], output_height, output_width), x.dtype)


def _axis_samples(start: float, size: float, bins: int, grid: int, limit: int):
    """Per sample along one axis: (low index, high index, low weight, high weight, inside)."""
    step = size / bins
    offsets = np.arange(bins)[:, None] * step + (np.arange(grid)[None, :] + 0.5) * step / grid
    p = (start + offsets).reshape(-1)
    inside = (p >= -1.0) & (p <= limit)
    p = np.maximum(p, 0.0)
    low = np.trunc(p).astype(np.int64)
    at_edge = low >= limit - 1
    low = np.where(at_edge, limit - 1, low)
    high = np.where(at_edge, limit - 1, low + 1)
    p = np.where(at_edge, low, p)
    frac = p - low
    return low, high, np.where(inside, 1 - frac, 0.0), np.where(inside, frac, 0.0)


def _roi_align_ref(
    x,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
):
    n, channels, height, width = x.shape
    out = np.zeros((len(rois), channels, output_height, output_width))
    half_pixel = coordinate_transformation_mode == "half_pixel"
    wide = x.astype(np.float64)
    for r, (box, b) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        if not 0 <= b < n:
            raise ExecutionError(f"RoiAlign batch index {int(b)} of box {r} is outside [0, {n})")
        x1, y1, x2, y2 = box * spatial_scale - (0.5 if half_pixel else 0.0)
        box_w, box_h = x2 - x1, y2 - y1
        if not half_pixel:
            box_w, box_h = max(box_w, 1.0), max(box_h, 1.0)
        grid_h = sampling_ratio or math.ceil(box_h / output_height)
        grid_w = sampling_ratio or math.ceil(box_w / output_width)
        if grid_h <= 0 or grid_w <= 0:  # an empty box (half_pixel does not widen it): 0
            continue
        y_lo, y_hi, wy_lo, wy_hi = _axis_samples(y1, box_h, output_height, grid_h, height)
        x_lo, x_hi, wx_lo, wx_hi = _axis_samples(x1, box_w, output_width, grid_w, width)
        image = wide[b]
        corners = [  # (C, samples_y, samples_x): each corner's weighted value
            (wy[:, None] * wx[None, :]) * image[:, ys][:, :, xs]
            for ys, wy in ((y_lo, wy_lo), (y_hi, wy_hi))
            for xs, wx in ((x_lo, wx_lo), (x_hi, wx_hi))
        ]
        shape = (channels, output_height, grid_h, output_width, grid_w)
        if mode == "avg":
            out[r] = sum(corners).reshape(shape).sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
        else:
            out[r] = np.max(corners, axis=0).reshape(shape).max(axis=(2, 4))
    return out.astype(x.dtype)


register_op_impl("RoiAlign", _roi_align_ref)

C_SOURCE = Path(__file__).with_name("roi_align.c").read_text()
register_op_impl("RoiAlign", backend="c", source=C_SOURCE, symbol="roi_align_2d")
