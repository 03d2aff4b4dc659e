"""Models PyTorch's own ONNX exporter writes: scope names, Shape -> Gather -> Concat
chains over dynamic axes, and back out through mdsl's exporter."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

import mdsl
from mdsl.frontends import onnx as mo
from tests.frontends.onnx_models import ort_run
from tests.frontends.test_torch_fx import BasicBlock, Encoder


def _torch_onnx(module, example, names, dynamic_axes):
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (example,), buffer, input_names=names[:1], output_names=names[1:],
            dynamic_axes=dynamic_axes, dynamo=False, opset_version=17,
        )  # fmt: skip
    return buffer.getvalue()


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(1)
    model = Encoder().eval()
    data = _torch_onnx(
        model, torch.randint(0, 50, (2, 5)), ["ids", "y"], {"ids": {0: "batch", 1: "seq"}}
    )
    return model, data


def test_dynamic_axes_become_symbols_and_shape_chains_fold(encoder):
    model, data = encoder
    g = mo.load(data)
    assert g.inputs["ids"].shape == (mdsl.Dim("batch"), mdsl.Dim("seq"))
    assert "Shape" not in {n.op_type for n in g.nodes}  # folded into Reshape attrs
    assert {"layer.0/attn/qkv", "layer.1/ffn"} <= set(g.layers)
    for shape in ((2, 5), (3, 7)):
        ids = torch.randint(0, 50, shape)
        with torch.no_grad():
            want = model(ids).numpy()
        np.testing.assert_allclose(
            mdsl.interpret(g, {"ids": ids.numpy()})["y"], want, rtol=1e-4, atol=1e-5
        )


def test_reexport_keeps_the_dynamic_axes_for_onnxruntime(encoder):
    model, data = encoder
    exported = mo.export(mo.load(data))
    for shape in ((1, 3), (4, 6)):
        ids = torch.randint(0, 50, shape)
        with torch.no_grad():
            want = model(ids).numpy()
        np.testing.assert_allclose(
            ort_run(exported, {"ids": ids.numpy()})[0], want, rtol=1e-4, atol=1e-5
        )


def test_cnn_exported_by_torch_optimizes_and_matches():
    torch.manual_seed(2)
    model = BasicBlock().eval()
    data = _torch_onnx(model, torch.randn(1, 8, 8, 8), ["x", "y"], {"x": {0: "N"}})
    g = mdsl.optimize(mo.load(data))
    x = torch.randn(3, 8, 8, 8)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x.numpy()})["y"], want, rtol=1e-4, atol=1e-5)


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _Inner()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x))


def test_the_newer_exporters_scope_metadata_gives_layers(tmp_path):
    """`torch.onnx.export(dynamo=True)` names nodes `node_linear_1` and keeps module scopes
    in node metadata: the layers come from there, weights with their modules."""
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    torch.manual_seed(0)
    model = _Outer().eval()
    x = torch.randn(2, 4)
    path = tmp_path / "nested.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False)
    g = mo.load(path)
    layers = {n.name: n.layer for n in g.nodes if n.op_type not in ("Input", "Output")}
    assert layers == {
        "block/lin/block.lin.weight": "block/lin",
        "block/lin/block.lin.bias": "block/lin",
        "block/lin/Gemm": "block/lin",
        "block/Relu": "block",
        "head/head.weight": "head",
        "head/head.bias": "head",
        "head/Gemm": "head",
    }
    (out,) = mdsl.interpret(g, {"x": x.numpy()}).values()
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
