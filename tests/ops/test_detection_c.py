"""NonZero and NonMaxSuppression compiled for C (`mdsl/ops/detection.c`): no callback,
the count reported by the C function bound for the kernels after it, results equal to
the interpreter's numpy reference on edge cases (negative zero and NaN, rank 0, empty
inputs, score ties and NaN scores, flipped and centre-point boxes, no threshold)."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.ops.native_checks import assert_native_and_equal


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "int8"])
def test_nonzero_equals_the_interpreter(dtype):
    with mdsl.Graph("nz") as g:
        y = ops.nonzero(g.input("x", ("N", 3), dtype))
        g.output(y, "y")
        g.output(ops.reduce_sum(y, axes=(1,), keepdims=True), "total")  # reads the count
    rng = np.random.default_rng(0)
    feeds = [{"x": (rng.integers(-1, 2, (n, 3))).astype(dtype)} for n in (4, 1, 0)]
    feeds.append({"x": np.zeros((2, 3), dtype)})  # nothing nonzero
    if dtype.startswith("float"):
        feeds.append({"x": np.array([[-0.0, np.nan, 0.0], [np.inf, 0.0, -1.0]], dtype)})
    assert_native_and_equal(g, feeds)


def test_nonzero_of_a_scalar_and_a_vector():
    with mdsl.Graph("nz") as g:
        g.output(ops.nonzero(g.input("s", (), "float32")), "s_idx")
        g.output(ops.nonzero(g.input("v", ("N",), "int32")), "v_idx")
    feeds = [
        {"s": np.float32(3.0), "v": np.array([0, 5, 0, 7], np.int32)},
        {"s": np.float32(0.0), "v": np.zeros(0, np.int32)},
    ]
    assert_native_and_equal(g, feeds)


def _nms_graph(center_point_box=0, score_threshold=0.3, limit=3, iou=0.5):
    with mdsl.Graph("nms") as g:
        keep = ops.non_max_suppression(
            g.input("boxes", ("B", "N", 4)),
            g.input("scores", ("B", 2, "N")),
            max_output_boxes_per_class=limit,
            iou_threshold=iou,
            score_threshold=score_threshold,
            center_point_box=center_point_box,
        )
        g.output(keep, "keep")
        g.output(ops.reduce_sum(keep, axes=(0,), keepdims=True), "total")
    return g


def _nms_feeds(rng, batch, n):
    boxes = rng.uniform(0, 1, (batch, n, 4)).astype(np.float32)
    scores = rng.uniform(0, 1, (batch, 2, n)).astype(np.float32)
    return {"boxes": boxes, "scores": scores}


@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("score_threshold", [None, 0.3])
def test_nms_equals_the_interpreter(center_point_box, score_threshold):
    g = _nms_graph(center_point_box, score_threshold)
    rng = np.random.default_rng(1)
    feeds = [_nms_feeds(rng, b, n) for b, n in [(1, 6), (2, 12), (1, 1), (1, 0)]]
    tied = _nms_feeds(rng, 1, 8)
    tied["scores"][:] = 0.5  # every score equal: index order
    tied["scores"][0, 1, 3] = np.nan  # NaN scores come last (or fail the threshold)
    feeds.append(tied)
    same = {"boxes": np.tile([[[0.1, 0.1, 0.5, 0.5]]], (1, 5, 1)).astype(np.float32)}
    same["scores"] = rng.uniform(0, 1, (1, 2, 5)).astype(np.float32)  # one box, repeated
    feeds.append(same)
    assert_native_and_equal(g, feeds)


def test_nms_with_flipped_corners_no_limit_and_an_iou_at_the_threshold():
    g = _nms_graph(score_threshold=None, limit=0, iou=0.5)
    assert_native_and_equal(g, [_nms_feeds(np.random.default_rng(2), 1, 4)])  # keeps none
    g = _nms_graph(score_threshold=None, limit=10, iou=0.5)
    boxes = np.array([[[1, 1, 0, 0], [0, 0, 1, 0.5], [0, 0.5, 1, 1], [0, 0, 1, 2 / 3]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6], [0.1, 0.2, 0.3, 0.4]]], np.float32)
    assert_native_and_equal(g, [{"boxes": boxes, "scores": scores}])


def test_nms_and_unique_share_one_sort_in_one_translation_unit():
    # detection.c and filtering.c both carry stable_sort.c; its guard keeps one copy
    with mdsl.Graph("nms_unique") as g:
        boxes, scores = g.input("boxes", ("B", "N", 4)), g.input("scores", ("B", 2, "N"))
        keep = ops.non_max_suppression(
            boxes, scores, max_output_boxes_per_class=3, iou_threshold=0.5, score_threshold=0.3
        )
        g.output(keep, "keep")
        g.output(ops.unique(g.input("x", ("M",)), sorted=True)[0], "unique")
    rng = np.random.default_rng(3)
    feeds = _nms_feeds(rng, 2, 7)
    feeds["x"] = rng.integers(0, 4, 9).astype(np.float32)
    assert_native_and_equal(g, [feeds])
