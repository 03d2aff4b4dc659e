"""PyTorch import: small models traced with torch.fx (or by running them when fx
cannot), checked against PyTorch's own outputs, with module paths as layer names."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mdsl
from mdsl.frontends import torch as mt

torch.manual_seed(0)


def _import_and_compare(module, *inputs, tol=1e-5, expect_fallback=False):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = mt.from_module(module, inputs if len(inputs) > 1 else inputs[0])
    fell_back = any(issubclass(w.category, mt.StaticTraceWarning) for w in caught)
    assert fell_back == expect_fallback, [str(w.message) for w in caught]
    feeds = {name: x.numpy() for name, x in zip(g.inputs, inputs)}
    got = mdsl.interpret(g, feeds)
    with torch.no_grad():
        want = module.eval()(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for value, expected in zip(got.values(), want):
        np.testing.assert_allclose(value, expected.numpy(), rtol=tol, atol=tol)
    return g


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.drop, self.fc2 = (
            nn.Linear(8, 16),
            nn.GELU(),
            nn.Dropout(0.2),
            nn.Linear(16, 4),
        )

    def forward(self, x):
        return F.softmax(self.fc2(self.drop(self.act(self.fc1(x)))), dim=-1)


def test_mlp_keeps_module_paths_and_parameter_names():
    model = MLP()
    g = _import_and_compare(model, torch.randn(3, 8))
    assert [n.name for n in g.nodes] == [
        "x", "fc1/weight", "fc1/bias", "fc1/Gemm", "act/Gelu", "drop/Dropout",
        "fc2/weight", "fc2/bias", "fc2/Gemm", "Softmax", "Output_output",
    ]  # fmt: skip
    np.testing.assert_array_equal(
        g.node("fc1/weight").const_value(), model.fc1.weight.detach().numpy()
    )
    assert g.node("drop/Dropout").attrs["ratio"] == pytest.approx(0.2)


class BasicBlock(nn.Module):
    """ResNet's basic block, plus pooling and a classifier head."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 3))
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = self.bn2(self.conv2(y))
        y = F.relu(y + x)
        return self.head(F.avg_pool2d(self.pool(y), 1))


def test_resnet_basic_block():
    g = _import_and_compare(BasicBlock().eval(), torch.randn(2, 8, 8, 8), tol=1e-4)
    assert g.node("conv1/Conv").attrs["pads"] == (1, 1, 1, 1)
    assert g.node("head.0/GlobalAveragePool").layer == "head.0"  # a list index stays with its list
    assert g.node("bn1/running_var").op_type == "Const"


class SelfAttention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class EncoderLayer(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.attn, self.norm1 = SelfAttention(d), nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 32), nn.GELU(approximate="tanh"), nn.Linear(32, d))
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ffn(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.layer = nn.ModuleList([EncoderLayer(), EncoderLayer()])

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.layer:
            x = block(x)
        return x[:, 0]


def test_transformer_encoder_through_fx_keeps_nested_layers():
    ids = torch.randint(0, 50, (2, 5))
    g = _import_and_compare(Encoder().eval(), ids, tol=1e-4)
    assert g.inputs["ids"].dtype == mdsl.int64
    assert g.node("embed/Gather").op_type == "Gather"
    assert {"layer.0", "layer.0/attn", "layer.0/attn/qkv", "layer.1/ffn.1"} <= set(g.layers)
    assert g.has_node("layer.1/attn/qkv/weight")


def test_torch_transformer_encoder_layer_is_traced_by_running_it():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True).eval()
    g = _import_and_compare(layer, torch.randn(2, 5, 16), tol=1e-4, expect_fallback=True)
    assert {"self_attn", "linear1", "norm1"} <= set(g.layers)
    assert g.has_node("self_attn/in_proj_weight")


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        with torch.no_grad():  # y = x, so the sign of x.sum() picks the branch
            self.fc.weight.copy_(torch.eye(4))
            self.fc.bias.zero_()

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:  # data-dependent: tracing fixes it to one side
            return y * 2
        return y - 1


def test_data_dependent_branch_is_reported_as_traced_statically():
    model = Branchy().eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = mt.from_module(model, torch.ones(1, 4))
    messages = [str(w.message) for w in caught if w.category is mt.StaticTraceWarning]
    assert len(messages) == 2 and "torch.fx could not trace Branchy" in messages[0]
    assert (
        "traced statically: 1 data-dependent decision(s) (__bool__ at test_torch_fx.py:"
        in messages[1]
    )
    assert "Mul" in {n.op_type for n in g.nodes} and "Sub" not in {n.op_type for n in g.nodes}
    other = -torch.ones(1, 4)  # PyTorch takes the other branch; the static graph cannot
    with torch.no_grad():
        assert torch.equal(model(other), other - 1)
    np.testing.assert_array_equal(
        mdsl.interpret(g, {"x": other.numpy()})["output"], other.numpy() * 2
    )


def test_functions_and_methods_on_tensors():
    class Ops(nn.Module):
        def forward(self, x, y):
            a = torch.cat([x, y], dim=1).permute(0, 2, 1).flatten(1)
            b = torch.clamp(x.mean(dim=-1, keepdim=True) - y.amax(-1, keepdim=True), min=0.0)
            c = torch.where(x > 0, x, torch.zeros_like(x) + 0.5)[:, 1:, None]
            return a, b.expand(-1, 3, 4), c.squeeze(-1).unsqueeze(0), F.max_pool1d(x, 2)

    _import_and_compare(Ops(), torch.randn(2, 3, 4), torch.randn(2, 3, 4))


def test_training_mode_is_restored_and_the_graph_is_inference():
    model = MLP().train()
    g = mt.from_module(model, torch.randn(2, 8))
    assert model.training
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model.eval()(x)
    np.testing.assert_allclose(
        mdsl.interpret(g, {"x": x.numpy()})["output"], expected.numpy(), rtol=1e-5, atol=1e-6
    )


def test_unsupported_calls_are_listed_together():
    class Odd(nn.Module):
        def forward(self, x):
            return torch.cumprod(x, dim=0) + torch.fliplr(x) + torch.cumprod(x, dim=1)

    with (
        pytest.raises(
            mdsl.GraphError, match=r"unsupported torch calls: cumprod \(2\), fliplr \(1\)"
        ),
        pytest.warns(mt.StaticTraceWarning),
    ):
        mt.from_module(Odd(), torch.randn(3, 3))


def test_an_error_the_module_raises_is_a_graph_error():
    class Broken(nn.Module):
        def forward(self, x):
            return x.relu() @ x  # (2, 3) @ (2, 3)

    with pytest.raises(
        mdsl.GraphError, match="Broken raised RuntimeError when run on example_inputs"
    ):
        mt.from_module(Broken(), torch.randn(2, 3))


def test_bad_arguments():
    with pytest.raises(mdsl.GraphError, match=r"takes a torch\.nn\.Module"):
        mt.from_module(lambda x: x, torch.randn(2))
    with pytest.raises(mdsl.GraphError, match="example_inputs must be a tensor"):
        mt.from_module(MLP(), [3, 4])


def test_layer_path_keeps_list_indices_with_their_list():
    assert mt.layer_path("encoder.layer.0.attention.self") == (
        "encoder",
        "layer.0",
        "attention",
        "self",
    )
    assert mt.layer_path("0.conv") == ("0", "conv")
