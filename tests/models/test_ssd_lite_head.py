"""An SSD-lite style detection head built from mdsl ops: a depthwise-separable conv
head predicts box offsets and class scores per anchor, boxes are decoded against fixed
anchors, NonMaxSuppression keeps the best per class and GatherND picks the kept boxes
and scores. Checked on the interpreter against a numpy pipeline with the same weights
(NMS itself is checked case by case in tests/ops/cases_detection.py), and compiled to C
and numba, whose buffers are sized by NMS's bound and whose box count is bound per call.
"""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ops.detection import _nms_ref

C_IN, GRID, CLASSES = 8, 4, 3
ANCHORS = GRID * GRID
RNG = np.random.default_rng(7)
W_DW = RNG.uniform(-1, 1, (C_IN, 1, 3, 3)).astype(np.float32)
W_BOX = RNG.uniform(-0.3, 0.3, (4, C_IN, 1, 1)).astype(np.float32)
W_CLS = RNG.uniform(-1, 1, (CLASSES, C_IN, 1, 1)).astype(np.float32)
_centres = (np.arange(GRID) + 0.5) / GRID
_cy, _cx = np.meshgrid(_centres, _centres, indexing="ij")
ANCHOR_BOXES = (
    np.stack([_cy - 0.2, _cx - 0.2, _cy + 0.2, _cx + 0.2], axis=-1)
    .reshape(1, ANCHORS, 4)
    .astype(np.float32)
)


def build_head() -> mdsl.Graph:
    with mdsl.Graph("ssd_lite_head") as g:
        x = g.input("features", (1, C_IN, GRID, GRID))
        feat = ops.relu(ops.conv(x, g.const("dw", W_DW), pads=1, group=C_IN))
        offsets = ops.conv(feat, g.const("box", W_BOX))  # (1, 4, G, G)
        logits = ops.conv(feat, g.const("cls", W_CLS))  # (1, classes, G, G)
        boxes = ops.add(
            ops.transpose(ops.reshape(offsets, shape=(1, 4, ANCHORS)), perm=(0, 2, 1)),
            g.const("anchors", ANCHOR_BOXES),
        )
        scores = ops.sigmoid(ops.reshape(logits, shape=(1, CLASSES, ANCHORS)))
        keep = ops.non_max_suppression(
            boxes, scores, max_output_boxes_per_class=3, iou_threshold=0.3, score_threshold=0.4
        )
        picked = ops.slice(keep, starts=(0,), ends=(3,), axes=(1,), steps=(2,))  # (batch, box)
        g.output(keep, "keep")
        g.output(ops.gather_nd(boxes, picked), "boxes")
        g.output(ops.gather_nd(ops.transpose(scores, perm=(0, 2, 1)), picked), "box_scores")
    return g


def _numpy_head(x):
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy
    feat = F.relu(F.conv2d(t(x), t(W_DW), padding=1, groups=C_IN))
    offsets = F.conv2d(feat, t(W_BOX)).numpy().reshape(1, 4, ANCHORS).transpose(0, 2, 1)
    boxes = offsets + ANCHOR_BOXES
    scores = 1 / (1 + np.exp(-F.conv2d(feat, t(W_CLS)).numpy().reshape(1, CLASSES, ANCHORS)))
    keep = _nms_ref(boxes, scores, center_point_box=0, max_output_boxes_per_class=3,
                    iou_threshold=0.3, score_threshold=0.4)  # fmt: skip
    return keep, boxes[0, keep[:, 2]], scores[0].T[keep[:, 2]]


def test_ssd_lite_head_on_the_interpreter():
    g = build_head()
    for seed in (0, 1):
        x = np.random.default_rng(seed).uniform(-1, 1, (1, C_IN, GRID, GRID)).astype(np.float32)
        got = mdsl.interpret(g, {"features": x})
        keep, boxes, scores = _numpy_head(x)
        assert len(keep) > 0
        np.testing.assert_array_equal(got["keep"], keep)
        np.testing.assert_allclose(got["boxes"], boxes, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["box_scores"], scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["c", "numba"])
def test_ssd_lite_head_compiled(backend):
    """NonMaxSuppression's box count is bound when it ran (docs/dynamic-shapes.md); counts
    that vary from call to call are checked in tests/ops/test_dynamic.py."""
    exe = mdsl.compile(build_head(), backend=backend)
    for seed in (0, 1):
        x = np.random.default_rng(seed).uniform(-1, 1, (1, C_IN, GRID, GRID)).astype(np.float32)
        got = exe(features=x)
        keep, boxes, scores = _numpy_head(x)
        np.testing.assert_array_equal(got["keep"], keep)
        np.testing.assert_allclose(got["boxes"], boxes, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["box_scores"], scores, rtol=1e-5, atol=1e-5)
