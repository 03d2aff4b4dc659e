"""DFT and GridSample exported to ONNX (the opset spellings that differ: DFT's axis as an
attribute before opset 20 and an input from it; GridSample's bilinear / bicubic before
opset 20) and run by ONNX Runtime, against mdsl's interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops

ort = pytest.importorskip("onnxruntime")
from mdsl.frontends import onnx as mo  # noqa: E402

RNG = np.random.default_rng(3)


def _run_exported(g: mdsl.Graph, feeds: dict, opset: int) -> np.ndarray:
    model = mo.export(g, opset=opset)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("opset", [19, 20])
@pytest.mark.parametrize(
    "attrs",
    [{"axis": 1}, {"axis": -2, "inverse": 1}, {"axis": 1, "onesided": 1, "dft_length": 8}],
    ids=["forward", "inverse", "rfft-padded"],
)
def test_dft_exports_for_onnxruntime(opset, attrs):
    x = RNG.standard_normal((2, 6, 3, 1 if attrs.get("onesided") else 2)).astype(np.float32)
    with mdsl.Graph() as g:
        g.output(ops.dft(g.input("x", x.shape), **attrs), "y")
    want = mdsl.interpret(g, {"x": x})["y"]
    np.testing.assert_allclose(_run_exported(g, {"x": x}, opset), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [16, 20])
@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_grid_sample_exports_for_onnxruntime(opset, mode):
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = RNG.uniform(-1.3, 1.3, (1, 3, 3, 2)).astype(np.float32)
    with mdsl.Graph() as g:
        y = ops.grid_sample(g.input("x", x.shape), g.input("grid", grid.shape), mode=mode,
                            padding_mode="border")  # fmt: skip
        g.output(y, "y")
    feeds = {"x": x, "grid": grid}
    want = mdsl.interpret(g, feeds)["y"]
    np.testing.assert_allclose(_run_exported(g, feeds, opset), want, rtol=1e-5, atol=1e-5)
