"""Ops whose output size the data decides: NonZero and NonMaxSuppression (ONNX
semantics), the tail of detection heads.

Each declares its output count as a data-dependent symbol in its `dynamic` attr
(`mdsl.ops.dynamic`, docs/dynamic-shapes.md) with an upper bound: NonZero at most every
element, NonMaxSuppression at most `max_output_boxes_per_class` boxes per batch and
class. ONNX passes NonMaxSuppression's limits as tensor inputs; mdsl holds them as
attributes, so they must be known at import time. The C backend runs both as compiled
loops (`detection.c`, "c" bindings) that report the count they produced.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.dynamic import data_dependent, value_dim
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import numel, unify_dims


@op_proto(
    "NonZero",
    inputs={"x": "any"},
    outputs={"y": "int64"},
    attrs={"dynamic": Attr([str], default=())},
    category="opaque",
)
def _nonzero(x, *, dynamic):
    """The coordinates of the nonzero elements of `x`, one column each, in row-major
    order (ONNX NonZero): shape (rank, count), count known when the node runs."""
    (count,) = dynamic
    return TensorType((max(x.rank, 1), value_dim(count)), DType.int64)


def nonzero(x, *, name=None) -> Tensor:
    """Coordinates of the nonzero elements of `x` (ONNX NonZero, numpy.nonzero stacked).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.nonzero(g.input("x", (2, 2))), "y")
    >>> mdsl.interpret(g, {"x": np.array([[1, 0], [0, 3]], np.float32)})["y"]
    array([[0, 1],
           [0, 1]])
    """
    return _nonzero(x, name=name)


def _nonzero_ref(x, **_):
    return np.stack(np.nonzero(np.atleast_1d(x))).astype(np.int64).reshape(max(x.ndim, 1), -1)


register_op_impl("NonZero", _nonzero_ref)
data_dependent("NonZero", count=lambda x, **_: 1, bounds=lambda x, **_: [numel(x.shape)])
C_SOURCE = "\n".join(
    Path(__file__).with_name(f).read_text() for f in ("stable_sort.c", "detection.c")
)
register_op_impl("NonZero", backend="c", source=C_SOURCE, symbol="detection_nonzero")


@op_proto(
    "NonMaxSuppression",
    inputs={"boxes": "float", "scores": "float"},
    outputs={"selected_indices": "int64"},
    attrs={
        "center_point_box": Attr(int, default=0, choices=(0, 1)),
        "max_output_boxes_per_class": Attr(int, default=0),
        "iou_threshold": Attr(float, default=0.0),
        "score_threshold": Attr(float, default=None),
        "dynamic": Attr([str], default=()),
    },
    category="opaque",
)
def _nms(
    boxes,
    scores,
    *,
    center_point_box,
    max_output_boxes_per_class,
    iou_threshold,
    score_threshold,
    dynamic,
):
    """Greedy non-maximum suppression per batch and class (ONNX NonMaxSuppression):
    rows of (batch, class, box index), highest score first within each class."""
    check(
        boxes.rank == 3 and boxes.shape[2] == 4,
        f"boxes must be (batch, boxes, 4), got {boxes.shape}",
    )
    check(scores.rank == 3, f"scores must be (batch, classes, boxes), got {scores.shape}")
    unify_dims(boxes.shape[0], scores.shape[0], "NonMaxSuppression batch")
    unify_dims(boxes.shape[1], scores.shape[2], "NonMaxSuppression box count")
    check(max_output_boxes_per_class >= 0, "max_output_boxes_per_class must be >= 0")
    (count,) = dynamic
    return TensorType((value_dim(count), 3), DType.int64)


def non_max_suppression(
    boxes,
    scores,
    *,
    max_output_boxes_per_class: int,
    iou_threshold: float = 0.0,
    score_threshold: float | None = None,
    center_point_box: int = 0,
    name=None,
) -> Tensor:
    """Indices (batch, class, box) of the boxes greedy NMS keeps (ONNX
    NonMaxSuppression); boxes are (y1, x1, y2, x2) corners, or (x, y, w, h) centres with
    `center_point_box=1`.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     keep = mdsl.ops.non_max_suppression(g.input("b", (1, 3, 4)), g.input("s", (1, 1, 3)),
    ...                                         max_output_boxes_per_class=3, iou_threshold=0.5)
    ...     g.output(keep, "keep")
    >>> boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [2, 2, 3, 3]]], np.float32)
    >>> mdsl.interpret(g, {"b": boxes, "s": np.array([[[0.9, 0.8, 0.7]]], np.float32)})["keep"]
    array([[0, 0, 0],
           [0, 0, 2]])
    """
    return _nms(
        boxes,
        scores,
        center_point_box=center_point_box,
        max_output_boxes_per_class=max_output_boxes_per_class,
        iou_threshold=iou_threshold,
        score_threshold=score_threshold,
        name=name,
    )


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(y1, x1, y2, x2) with y1 <= y2 and x1 <= x2."""
    if center_point_box:
        x, y, w, h = boxes.T
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=1)
    y1, x1, y2, x2 = boxes.T
    return np.stack(
        [np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=1
    )


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    if area_a <= 0 or area_b <= 0:
        return 0.0
    inter_h = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter_w = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = inter_h * inter_w
    return float(inter / (area_a + area_b - inter))


def _nms_ref(
    boxes,
    scores,
    *,
    center_point_box,
    max_output_boxes_per_class,
    iou_threshold,
    score_threshold,
    **_,
):
    rows = []
    for batch in range(boxes.shape[0]):
        corners = _corners(boxes[batch].astype(np.float64), center_point_box)
        for cls in range(scores.shape[1]):
            s = scores[batch, cls].astype(np.float64)
            order = np.argsort(-s, kind="stable")
            if score_threshold is not None:
                order = order[s[order] > score_threshold]
            kept: list[int] = []
            for i in order:
                if len(kept) >= max_output_boxes_per_class:
                    break
                if all(_iou(corners[i], corners[k]) <= iou_threshold for k in kept):
                    kept.append(int(i))
            rows += [(batch, cls, k) for k in kept]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


register_op_impl("NonMaxSuppression", _nms_ref)
register_op_impl("NonMaxSuppression", backend="c", source=C_SOURCE, symbol="detection_nms")
data_dependent(
    "NonMaxSuppression",
    count=lambda *_, **__: 1,
    bounds=lambda boxes, scores, *, max_output_boxes_per_class, **_: [
        scores.shape[0] * scores.shape[1] * max_output_boxes_per_class
    ],
)
