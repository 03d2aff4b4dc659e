"""The control-flow detector example against PyTorch (preprocessing, backbone, head) and a
plain numpy non-maximum suppression; only the taken preprocessing path runs.

Tolerances: float32 convolutions over 32x32 inputs, rtol/atol 1e-4; the keep mask and the
count must be equal (the scores are well separated from the thresholds, checked below).
"""

from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from examples import control_flow as example
from tests.models.params import param

RTOL, ATOL = 1e-4, 1e-4
SIZES = [(48, 64), (16, 16), (256, 192), (512, 300)]  # small path twice, large path twice


@pytest.fixture(scope="module")
def graph() -> mdsl.Graph:
    return example.build()


def torch_detector(g: mdsl.Graph, image: np.ndarray):
    """boxes, scores of the example's graph computed by PyTorch with the same weights."""
    x = torch.from_numpy(image)
    if x.numel() > 3 * example.LARGE:
        then = g.node("Detector/Preprocess/cond/If").subgraphs["then_branch"]
        mean, std = (
            torch.from_numpy(
                np.array(then.node(f"Detector/Preprocess/cond/then/{name}").const_value())
            )
            for name in ("mean", "std")
        )
        x = F.interpolate(
            x, size=(example.SIDE, example.SIDE), mode="bilinear", align_corners=False
        )
        x = (x - mean) / std
    else:
        x = F.interpolate(x, size=(example.SIDE, example.SIDE), mode="nearest") / 128.0 - 1.0
    for i in range(2):
        w, b = param(g, f"Detector/Backbone/w{i}"), param(g, f"Detector/Backbone/b{i}")
        x = torch.relu(F.conv2d(x, w, b, stride=2, padding=1))
    features = x.mean(dim=(2, 3))
    raw = features @ param(g, "Detector/Head/w") + param(g, "Detector/Head/b")
    raw = raw.reshape(example.NUM_BOXES, 5)
    centers, half = torch.sigmoid(raw[:, :2]), torch.sigmoid(raw[:, 2:4]) * example.BOX_HALF_SIZE
    return torch.cat([centers - half, centers + half], dim=1).numpy(), torch.sigmoid(
        raw[:, 4]
    ).numpy()


def numpy_nms(boxes: np.ndarray, scores: np.ndarray):
    """Greedy NMS written directly: (keep mask, count, boxes suppressed by overlap)."""
    keep = np.zeros(len(boxes), np.float32)
    remaining = scores.astype(np.float64).copy()
    count = overlaps = 0
    while count < example.MAX_DETECTIONS and remaining.max() > example.SCORE_THRESHOLD:
        best = int(np.argmax(remaining))
        keep[best] = 1.0
        x1 = np.maximum(boxes[:, 0], boxes[best, 0])
        y1 = np.maximum(boxes[:, 1], boxes[best, 1])
        x2 = np.minimum(boxes[:, 2], boxes[best, 2])
        y2 = np.minimum(boxes[:, 3], boxes[best, 3])
        inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        iou = inter / (area + area[best] - inter)
        suppressed = iou > example.IOU_THRESHOLD
        overlaps += int(np.sum(suppressed & (remaining > -1))) - 1
        suppressed[best] = True
        remaining[suppressed] = -1.0
        count += 1
    return keep, count, overlaps


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_the_detector_matches_pytorch_and_numpy_nms(graph, height, width):
    image = example.random_image(height, width, seed=height)
    got = mdsl.interpret(graph, {"image": image})
    boxes, scores = torch_detector(graph, image)
    np.testing.assert_allclose(got["boxes"], boxes, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["scores"], scores, rtol=RTOL, atol=ATOL)
    assert np.min(np.abs(scores - example.SCORE_THRESHOLD)) > 1e-3  # no knife-edge decisions
    keep, count, _ = numpy_nms(boxes, scores)
    np.testing.assert_array_equal(got["keep"], keep)
    assert got["count"] == count and got["count"].dtype == np.int64


def test_the_cases_exercise_suppression_and_both_stopping_rules(graph):
    counts, overlaps = set(), 0
    for height, width in SIZES:
        boxes, scores = torch_detector(graph, example.random_image(height, width, seed=height))
        _, count, suppressed = numpy_nms(boxes, scores)
        counts.add(count)
        overlaps += suppressed
    assert overlaps > 0, "no box was ever suppressed by overlap"
    assert len(counts) > 1 or counts == {example.MAX_DETECTIONS}


@pytest.mark.parametrize(("height", "width", "taken"), [(48, 64, "else"), (256, 192, "then")])
def test_only_the_taken_preprocessing_path_runs(graph, height, width, taken):
    values = mdsl.interpret(graph, {"image": example.random_image(height, width)}, capture=True)
    prefix = "Detector/Preprocess/cond/"
    ran = {name[len(prefix) :].split("/")[0] for name in values if name.startswith(prefix)}
    assert ran == {taken, "If"}
    assert f"{prefix}{taken}/Resize" in values
    loop_runs = int(values["count"])
    assert ("Detector/NMS/while/body/ArgMax" in values) == (loop_runs > 0)


def test_optimizing_preserves_the_results(graph):
    image = example.random_image(40, 60, seed=3)
    want = mdsl.interpret(graph, {"image": image})
    for level in (1, 2, 3):
        got = mdsl.interpret(mdsl.optimize(graph, level=level), {"image": image})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_image_sizes_outside_the_declared_range_are_rejected(graph):
    with pytest.raises(mdsl.ExecutionError, match=r"H = 8 is outside its range \[16, 512\]"):
        mdsl.interpret(graph, {"image": example.random_image(8, 32)})


def test_the_example_docstrings_run():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(example, example.__name__) if t.examples]
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert len(tests) >= 2 and runner.failures == 0, "\n".join(report)


def test_the_example_runs_as_a_script():
    done = subprocess.run(
        [sys.executable, example.__file__], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "48x64: preprocessing ran ['else']" in done.stdout
    assert "256x192: preprocessing ran ['then']" in done.stdout
