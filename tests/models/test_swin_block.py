"""A Hugging Face Swin transformer (two stages, shifted windows, random weights) exported
by PyTorch: its window-partition reshapes, the cyclic shift and the attention mask built
from constants import, and the interpreter and C both match ONNX Runtime. C runs every
node natively (no Python callbacks)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import mdsl
from mdsl.frontends import onnx as mo

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")


class _LastHidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        return self.model(pixel_values=pixels).last_hidden_state


def _swin() -> torch.nn.Module:
    """8x8 patches, window 4: the second block of stage one is a shifted-window block."""
    torch.manual_seed(0)
    config = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
        window_size=4, mlp_ratio=2.0,
    )  # fmt: skip
    config._attn_implementation = "eager"
    return _LastHidden(transformers.SwinModel(config).eval())


@pytest.fixture(scope="module")
def exported():
    pixels = torch.randn(1, 3, 32, 32)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _swin(), (pixels,), buffer, input_names=["x"], output_names=["y"],
            opset_version=17, dynamo=False,
        )  # fmt: skip
    data = buffer.getvalue()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return mo.load(data), session


def _pixels(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)


def test_swin_imports_with_its_shifted_window_attention(exported):
    g, _ = exported
    ops = {n.op_type for n in g.nodes}
    assert {"Softmax", "LayerNormalization", "Conv"} <= ops
    assert sum(n.op_type == "Softmax" for n in g.nodes) == 4  # one per block


def test_swin_on_the_interpreter_matches_onnx_runtime(exported):
    g, session = exported
    for seed in (0, 1):
        x = _pixels(seed)
        want = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_swin_compiled_to_c_matches_onnx_runtime_with_no_fallbacks(exported):
    g, session = exported
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    for seed in (0, 1):
        x = _pixels(seed)
        want = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-4, atol=1e-5)
