"""RoiAlign against ONNX Runtime (opset 10 and 16, avg and max, both coordinate modes,
adaptive and fixed sampling, boxes reaching outside the image), on the interpreter and
compiled to C (its own C loop, not a Python callback); a bad batch index is a clear
ExecutionError."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from mdsl.frontends import onnx as mo  # noqa: E402

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
ROIS = np.array(
    [[0, 0, 10, 8], [2.3, 1.1, 6.7, 7.9], [-3, -2, 4, 5], [8, 6, 14, 12], [5, 5, 5.2, 5.4]],
    np.float32,
)
BATCH = np.array([0, 1, 1, 0, 1], np.int64)
CONFIGS = [
    (10, {"mode": "avg", "output_height": 3, "output_width": 4, "sampling_ratio": 2}),
    (10, {"mode": "max", "output_height": 2, "output_width": 2, "spatial_scale": 0.5}),
    (16, {"output_height": 4, "output_width": 3}),  # half_pixel, adaptive sampling
    (16, {"coordinate_transformation_mode": "output_half_pixel", "sampling_ratio": 3}),
    (16, {"mode": "max", "output_height": 3, "output_width": 3, "sampling_ratio": 1}),
]


def _model(opset: int, attrs: dict) -> bytes:
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], **attrs)
    inputs = [
        helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, X.shape),
        helper.make_tensor_value_info("rois", onnx.TensorProto.FLOAT, ROIS.shape),
        helper.make_tensor_value_info("b", onnx.TensorProto.INT64, BATCH.shape),
    ]
    out = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "roi_align", inputs, out)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("opset", "attrs"), CONFIGS, ids=[f"{o}-{i}" for i, (o, _) in enumerate(CONFIGS)]
)
def test_matches_onnxruntime_on_the_interpreter_and_c(opset, attrs):
    model = _model(opset, attrs)
    feeds = {"x": X, "rois": ROIS, "b": BATCH}
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    g = mo.load(model)
    np.testing.assert_allclose(mdsl.interpret(g, feeds)["y"], want, rtol=1e-5, atol=1e-6)
    exe = mdsl.compile(g, backend="c")
    np.testing.assert_allclose(exe(**feeds)["y"], want, rtol=1e-5, atol=1e-6)
    assert exe.plan.fallbacks == []
    assert {k.kind for k in exe.kernels} == {"custom C op"}


@pytest.mark.parametrize("backend", ["interpreter", "c"])
def test_a_batch_index_outside_the_batch_is_an_execution_error(backend):
    with mdsl.Graph() as g:
        x, rois, b = g.input("x", X.shape), g.input("rois", ROIS.shape), g.input("b", (5,), "int64")
        g.output(ops.roi_align(x, rois, b), "y")
    feeds = {"x": X, "rois": ROIS, "b": np.array([0, 1, 2, 0, 0])}
    run = (
        (lambda f: mdsl.interpret(g, f))
        if backend == "interpreter"
        else mdsl.compile(g, backend="c").run
    )
    with pytest.raises(mdsl.ExecutionError, match="RoiAlign"):
        run(feeds)


def test_rois_of_another_dtype_are_refused_at_build_time():
    with pytest.raises(mdsl.ShapeError, match="rois"), mdsl.Graph() as g:
        ops.roi_align(g.input("x", (1, 1, 4, 4)), g.input("r", (1, 4), "float64"),
                      g.input("b", (1,), "int64"))  # fmt: skip
