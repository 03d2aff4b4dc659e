"""The ResNet basic block example against a PyTorch module holding the same weights.

Tolerances: float32 end to end, rtol 1e-4 / atol 1e-4 (two 3x3 convolutions summing
~600 products each; observed differences are ~1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import mdsl
from examples import resnet_block
from tests.models.params import param, set_param

RTOL, ATOL = 1e-4, 1e-4
CONVS = ("Block/conv_bn_relu", "Block/conv_bn_relu_1")


class TorchConvBnRelu(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))

    def load_from(self, g: mdsl.Graph, prefix: str) -> None:
        with torch.no_grad():
            self.conv.weight.copy_(param(g, f"{prefix}/weight"))
            self.bn.weight.copy_(param(g, f"{prefix}/gamma"))
            self.bn.bias.copy_(param(g, f"{prefix}/beta"))
            self.bn.running_mean.copy_(param(g, f"{prefix}/mean"))
            self.bn.running_var.copy_(param(g, f"{prefix}/var"))


class TorchBasicBlock(nn.Module):
    """relu(conv_bn_relu(conv_bn_relu(x)) + x), the block of API.md."""

    def __init__(self, channels: int):
        super().__init__()
        self.first = TorchConvBnRelu(channels, channels)
        self.second = TorchConvBnRelu(channels, channels)

    def forward(self, x):
        return torch.relu(self.second(self.first(x)) + x)


def randomize_batch_norm(g: mdsl.Graph, prefix: str, channels: int, rng) -> None:
    """Non-trivial statistics, as after training (the example initializes an identity BN)."""
    set_param(g, f"{prefix}/gamma", rng.uniform(0.5, 1.5, channels))
    set_param(g, f"{prefix}/beta", rng.normal(0, 0.2, channels))
    set_param(g, f"{prefix}/mean", rng.normal(0, 0.2, channels))
    set_param(g, f"{prefix}/var", rng.uniform(0.5, 2.0, channels))


def torch_block_for(g: mdsl.Graph, channels: int) -> TorchBasicBlock:
    block = TorchBasicBlock(channels).eval()
    block.first.load_from(g, CONVS[0])
    block.second.load_from(g, CONVS[1])
    return block


@pytest.fixture(scope="module")
def small_block():
    """One graph with a symbolic batch and trained-looking batch norms (8 channels, 10x10)."""
    g = resnet_block.build(channels=8, size=10)
    rng = np.random.default_rng(1)
    for prefix in CONVS:
        set_param(g, f"{prefix}/weight", rng.normal(0, 0.3, (8, 8, 3, 3)))
        randomize_batch_norm(g, prefix, 8, rng)
    return g


def test_node_names_follow_layer_paths():
    g = resnet_block.build()
    per_conv = ["weight", "Conv", "gamma", "beta", "mean", "var", "BatchNormalization", "Relu"]
    expected = ["x"]
    for prefix in CONVS:
        expected += [f"{prefix}/{leaf}" for leaf in per_conv]
    expected += ["Block/Add", "Block/Relu", "Output_y"]
    assert [n.name for n in g.nodes] == expected
    assert g.node("Block/conv_bn_relu/Conv").op_type == "Conv"
    assert g.node("Block/conv_bn_relu_1/BatchNormalization").op_type == "BatchNormalization"


def test_layers_record_paths_and_functions():
    g = resnet_block.build()
    assert list(g.layers) == ["Block", *CONVS]
    assert g.layers["Block"].function == "examples.resnet_block.basic_block"
    assert g.layers[CONVS[1]].function == "examples.resnet_block.conv_bn_relu"
    assert g.layers[CONVS[1]].node_names == [
        f"{CONVS[1]}/{leaf}"
        for leaf in ["weight", "Conv", "gamma", "beta", "mean", "var", "BatchNormalization", "Relu"]
    ]
    assert g.layers["Block"].node_names == ["Block/Add", "Block/Relu"]


def test_shapes_params_and_summary():
    g = resnet_block.build()
    assert g.inputs["x"].shape == (mdsl.Dim("N"), 64, 56, 56)
    assert g.outputs["y"].shape == (mdsl.Dim("N"), 64, 56, 56)
    assert tuple(g.node("Block/conv_bn_relu/Conv").attrs["strides"]) == (1, 1)
    assert tuple(g.node("Block/conv_bn_relu/Conv").attrs["pads"]) == (1, 1, 1, 1)
    per_conv = 64 * 64 * 3 * 3 + 4 * 64
    assert g.parameter_count() == (2 * per_conv, 4 * 2 * per_conv)
    summary = g.summary()
    assert "resnet_block" in summary and f"{2 * per_conv:,} parameters" in summary
    mdsl.ir.verify(g)


@pytest.mark.parametrize("batch", [1, 3])
def test_matches_torch_for_any_batch(small_block, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 8, 10, 10), dtype=np.float32)
    y = mdsl.interpret(small_block, {"x": x})["y"]
    with torch.no_grad():
        expected = torch_block_for(small_block, 8)(torch.from_numpy(x)).numpy()
    assert y.shape == (batch, 8, 10, 10)
    assert (y > 0).any() and (y == 0).any()  # both ReLU regimes are exercised
    np.testing.assert_allclose(y, expected, rtol=RTOL, atol=ATOL)


def test_default_size_matches_torch():
    g = resnet_block.build()
    x = np.random.default_rng(7).standard_normal((1, 64, 56, 56), dtype=np.float32)
    y = mdsl.interpret(g, {"x": x})["y"]
    with torch.no_grad():
        expected = torch_block_for(g, 64)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, expected, rtol=RTOL, atol=ATOL)


def test_strided_conv_bn_relu_matches_torch():
    with mdsl.Graph("strided") as g:
        x = g.input("x", ("N", 3, 9, 9))
        g.output(resnet_block.conv_bn_relu(x, 5, stride=2), "y")
    assert g.outputs["y"].shape == (mdsl.Dim("N"), 5, 5, 5)
    rng = np.random.default_rng(3)
    randomize_batch_norm(g, "conv_bn_relu", 5, rng)
    x = rng.standard_normal((2, 3, 9, 9), dtype=np.float32)
    module = TorchConvBnRelu(3, 5, stride=2).eval()
    module.load_from(g, "conv_bn_relu")
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], expected, rtol=RTOL, atol=ATOL)


def test_wrong_channel_count_is_reported_at_run_time():
    g = resnet_block.build(channels=8, size=10)
    with pytest.raises(mdsl.ExecutionError, match="input 'x' dim 1: size 4, declared 8"):
        mdsl.interpret(g, {"x": np.zeros((1, 4, 10, 10), np.float32)})
