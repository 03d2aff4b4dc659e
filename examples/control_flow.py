"""A small detector with control flow kept in the graph: a data-dependent branch and a loop.

    image (1, 3, H, W), H and W symbolic in [16, 512]
      Detector/Preprocess   mdsl.cond on the image size: a large image is resized to
                            32x32 bilinearly and standardized per channel, a small one
                            resized nearest and scaled to [-1, 1]; only one path runs
      Detector/Backbone     two 3x3 stride-2 convolutions with ReLU, global average pool
      Detector/Head         a linear layer to K boxes (x1, y1, x2, y2 in [0, 1]) and scores
      Detector/NMS          mdsl.while_loop: greedy non-maximum suppression: while fewer
                            than MAX_DETECTIONS boxes are kept and the best remaining score
                            exceeds SCORE_THRESHOLD, keep that box and suppress every box
                            overlapping it (IoU > IOU_THRESHOLD)

Outputs: `boxes` (K, 4), `scores` (K,), `keep` (K,) (1.0 for kept boxes) and `count`
(how many were kept, the number of loop iterations). Nothing is computed for both paths
and selected afterwards: the If and While nodes hold subgraphs that run only when taken.

    python examples/control_flow.py
"""

from __future__ import annotations

import numpy as np

import mdsl
from mdsl import ops

SIDE = 32  # the backbone's input size
LARGE = 128 * 128  # images with more pixels take the bilinear path
NUM_BOXES = 8
MAX_DETECTIONS = 6
SCORE_THRESHOLD = 0.45
IOU_THRESHOLD = 0.3
BOX_HALF_SIZE = 0.4  # at most: boxes are up to 0.8 wide
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1) * 255


@mdsl.layer(name="Preprocess")
def preprocess(image):
    """Resize to SIDE x SIDE and normalize, by a path chosen from the image size.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (1, 3, "H", "W"))
    ...     g.output(preprocess(x), "y")
    >>> g.outputs["y"].shape, g.node("Preprocess/cond/If").op_type
    ((1, 3, 32, 32), 'If')
    """
    large = ops.size(image) > 3 * LARGE
    return mdsl.cond(large, lambda: _large_path(image), lambda: _small_path(image))


def _large_path(image):
    resized = ops.resize(image, sizes=(SIDE, SIDE), axes=(2, 3), mode="linear")
    mean = mdsl.param("mean", MEAN.shape, init=MEAN)
    std = mdsl.param("std", STD.shape, init=STD)
    return (resized - mean) / std


def _small_path(image):
    resized = ops.resize(
        image,
        sizes=(SIDE, SIDE),
        axes=(2, 3),
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    return resized * (1.0 / 128.0) - 1.0


@mdsl.layer(name="Backbone")
def backbone(x):
    """Two stride-2 3x3 convolutions with ReLU and a global average pool: (1, 16)."""
    for i, channels in enumerate((8, 16)):
        w = mdsl.param(f"w{i}", (channels, x.shape[1], 3, 3), scale=0.2)
        b = mdsl.param(f"b{i}", (channels,), scale=0.1)
        x = ops.relu(ops.conv2d(x, w, b, strides=2, pads=1))
    return ops.flatten(ops.global_average_pool(x))


@mdsl.layer(name="Head")
def head(features):
    """K boxes (x1, y1, x2, y2) inside the unit square and their scores in (0, 1)."""
    w = mdsl.param("w", (features.shape[1], NUM_BOXES * 5), scale=1.0)
    b = mdsl.param("b", (NUM_BOXES * 5,), scale=1.0)
    raw = ops.linear(features, w, b).reshape(NUM_BOXES, 5)
    centers = ops.sigmoid(raw[:, 0:2])
    half = ops.sigmoid(raw[:, 2:4]) * BOX_HALF_SIZE
    boxes = ops.concat([centers - half, centers + half], axis=1)
    return boxes, ops.sigmoid(raw[:, 4])


def iou_with(boxes, box):
    """Intersection over union of each of `boxes` (K, 4) with `box` (4,)."""
    left = ops.maximum(boxes[:, 0], box[0])
    top = ops.maximum(boxes[:, 1], box[1])
    right = ops.minimum(boxes[:, 2], box[2])
    bottom = ops.minimum(boxes[:, 3], box[3])
    inter = ops.relu(right - left) * ops.relu(bottom - top)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    area = (box[2] - box[0]) * (box[3] - box[1])
    return inter / (areas + area - inter)


@mdsl.layer(name="NMS")
def nms(boxes, scores):
    """Greedy non-maximum suppression as a While loop; returns (keep mask, count)."""

    def go_on(count, remaining, keep):
        return ops.logical_and(count < MAX_DETECTIONS, remaining.max() > SCORE_THRESHOLD)

    def select_best(count, remaining, keep):
        best = ops.argmax(remaining, axis=0, keepdims=False)
        chosen = ops.one_hot(best, NUM_BOXES)
        overlapping = iou_with(boxes, ops.gather(boxes, best, axis=0)) > IOU_THRESHOLD
        suppressed = ops.logical_or(overlapping, chosen > 0.5)
        return count + 1, ops.where(suppressed, -1.0, remaining), keep + chosen

    zero = np.zeros(NUM_BOXES, np.float32)
    count, _, keep = mdsl.while_loop(
        go_on, select_best, (np.int64(0), scores, zero), max_iterations=MAX_DETECTIONS
    )
    return keep, count


@mdsl.layer(name="Detector")
def detector(image):
    boxes, scores = head(backbone(preprocess(image)))
    keep, count = nms(boxes, scores)
    return boxes, scores, keep, count


def build() -> mdsl.Graph:
    """The detector as a graph: input `image` (1, 3, H, W), H and W in [16, 512].

    >>> g = build()
    >>> [n.name for n in g.nodes if n.subgraphs]
    ['Detector/Preprocess/cond/If', 'Detector/NMS/while/While']
    >>> then = g.node("Detector/Preprocess/cond/If").subgraphs["then_branch"]
    >>> [n.name for n in then.nodes if n.op_type == "Resize"]
    ['Detector/Preprocess/cond/then/Resize']
    """
    side = lambda name: mdsl.Dim(name, min=16, max=512)  # noqa: E731
    with mdsl.Graph("detector") as g:
        image = g.input("image", (1, 3, side("H"), side("W")))
        boxes, scores, keep, count = detector(image)
        g.output(boxes, "boxes")
        g.output(scores, "scores")
        g.output(keep, "keep")
        g.output(count, "count")
    return g


def random_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 255, size=(1, 3, height, width)).astype(np.float32)


def main() -> None:
    g = build()
    print(g.summary())
    for height, width in ((48, 64), (256, 192)):
        values = mdsl.interpret(g, {"image": random_image(height, width)}, capture=True)
        prefix = "Detector/Preprocess/cond/"
        ran = sorted({n.split("/")[3] for n in values if n.startswith(prefix) and "/If" not in n})
        kept = np.flatnonzero(values["keep"]).tolist()
        print(f"{height}x{width}: preprocessing ran {ran}; kept boxes {kept} ({values['count']})")


if __name__ == "__main__":
    main()
