"""Cases for RoiAlign, checked against a scalar loop written from Caffe2's RoIAlign (the
algorithm ONNX specifies); tests/ops/test_roi_align.py compares with ONNX Runtime."""

from __future__ import annotations

import math

import numpy as np

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand


def _bilinear(plane, y, x):
    height, width = plane.shape
    if y < -1 or y > height or x < -1 or x > width:
        return [0.0]
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    y1, x1 = min(y0 + 1, height - 1), min(x0 + 1, width - 1)
    if y0 >= height - 1:
        y0 = y1 = height - 1
        y = float(y0)
    if x0 >= width - 1:
        x0 = x1 = width - 1
        x = float(x0)
    ly, lx = y - y0, x - x0
    return [(1 - ly) * (1 - lx) * plane[y0, x0], (1 - ly) * lx * plane[y0, x1],
            ly * (1 - lx) * plane[y1, x0], ly * lx * plane[y1, x1]]  # fmt: skip


def _loop(x, rois, batch, *, out_h, out_w, ratio, scale, half_pixel, mode):
    out = np.zeros((len(rois), x.shape[1], out_h, out_w))
    offset = 0.5 if half_pixel else 0.0
    for r, box in enumerate(rois.astype(np.float64)):
        x1, y1, x2, y2 = (v * scale - offset for v in box)
        w, h = x2 - x1, y2 - y1
        if not half_pixel:
            w, h = max(w, 1.0), max(h, 1.0)
        gh, gw = ratio or math.ceil(h / out_h), ratio or math.ceil(w / out_w)
        for c in range(x.shape[1]):
            plane = x[batch[r], c].astype(np.float64)
            for i in range(out_h):
                for j in range(out_w):
                    points = [
                        _bilinear(
                            plane,
                            y1 + (i + (a + 0.5) / gh) * h / out_h,
                            x1 + (j + (b + 0.5) / gw) * w / out_w,
                        )
                        for a in range(gh)
                        for b in range(gw)
                    ]
                    if mode == "avg":
                        out[r, c, i, j] = sum(map(sum, points)) / max(gh * gw, 1)
                    else:
                        out[r, c, i, j] = max(map(max, points))
    return out.astype(x.dtype)


X = rand(2, 2, 6, 7)
ROIS = np.array([[0.5, 1, 5, 4.5], [-1, -1, 3, 2], [4, 3, 9, 8]], np.float32)
BATCH = np.array([1, 0, 1], np.int64)


def _case(mode="avg", coords="half_pixel", out=(2, 3), ratio=0, scale=1.0, dtype="float32"):
    def build(x, r, b):
        return ops.roi_align(x, r, b, coordinate_transformation_mode=coords, mode=mode,
                             output_height=out[0], output_width=out[1], sampling_ratio=ratio,
                             spatial_scale=scale)  # fmt: skip

    return OpCase(
        "RoiAlign",
        build,
        {"x": X.astype(dtype), "rois": ROIS.astype(dtype), "b": BATCH},
        numpy_ref=lambda x, r, b: _loop(
            x,
            r,
            b,
            out_h=out[0],
            out_w=out[1],
            ratio=ratio,
            scale=scale,
            half_pixel=coords == "half_pixel",
            mode=mode,
        ),
        id=f"{mode}-{coords}-{ratio}-{dtype}",
    )


CASES = [
    _case(),
    _case("max", "output_half_pixel", ratio=2),
    _case("avg", "output_half_pixel", out=(3, 3), scale=0.5, dtype="float64"),
    OpCase(
        "RoiAlign",
        lambda x, r, b: ops.roi_align(x, r, b),
        {"x": X, "rois": ROIS[:, :3].copy(), "b": BATCH},
        raises=mdsl.ShapeError,
        id="rois-not-boxes",
    ),
]
