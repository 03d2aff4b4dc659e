"""Cases for NonZero (against torch.nonzero) and NonMaxSuppression (against results
worked out by hand: which box overlaps which is chosen so the answer is plain)."""

from __future__ import annotations

import numpy as np

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

# Three clusters: boxes 0/1 overlap heavily (IoU ~0.82), 2 stands alone, 3 overlaps 2 a
# little (IoU 1/7); corners (y1, x1, y2, x2), box 1 given with flipped corners.
_BOXES = np.array([[[0, 0, 1, 1], [1, 1.1, 0, 0.1], [2, 2, 4, 4], [3, 3, 5, 5]]], np.float32)
_SCORES = np.array([[[0.6, 0.9, 0.5, 0.4], [0.1, 0.2, 0.3, 0.05]]], np.float32)


def _nms_case(case_id, expected, **attrs):
    return OpCase(
        "NonMaxSuppression",
        lambda b, s: ops.non_max_suppression(b, s, **attrs),
        {"b": _BOXES, "s": _SCORES},
        numpy_ref=lambda b, s: np.array(expected, np.int64).reshape(-1, 3),
        id=case_id,
    )


CASES = [
    OpCase("NonZero", ops.nonzero, {"x": rand(3, 4, dtype="int32", lo=-1, hi=1)},
           lambda x: x.nonzero().T, id="int32"),
    OpCase("NonZero", ops.nonzero, {"x": rand(2, 3, 2, dtype="bool")},
           lambda x: x.nonzero().T, id="bool-3d"),
    OpCase("NonZero", ops.nonzero, {"x": np.zeros((2, 2), np.float32)},
           lambda x: x.nonzero().T, id="empty"),
    _nms_case("iou", [[0, 0, 1], [0, 0, 2], [0, 0, 3], [0, 1, 2], [0, 1, 1], [0, 1, 3]],
              max_output_boxes_per_class=4, iou_threshold=0.5),
    _nms_case("iou-low", [[0, 0, 1], [0, 0, 2], [0, 1, 2], [0, 1, 1]],
              max_output_boxes_per_class=4, iou_threshold=0.1),
    _nms_case("score-threshold-limit", [[0, 0, 1], [0, 0, 2], [0, 1, 2]],
              max_output_boxes_per_class=2, iou_threshold=0.5, score_threshold=0.25),
    OpCase("NonMaxSuppression",
           lambda b, s: ops.non_max_suppression(b, s, max_output_boxes_per_class=1),
           {"b": rand(1, 4, 4), "s": rand(1, 2, 5)}, raises=mdsl.ShapeError, id="box-count"),
]  # fmt: skip
