"""Real models compile to generated C entirely: no node of theirs runs as a Python
callback (`exe.plan.callbacks`, listed in `exe.plan.fallbacks`).

The plans are built as the C backend builds them (`plan_variant`; no C compiler needed)
for ONNX's light models and every example; small PyTorch models exported to ONNX with the
ops of the benchmark zoo that once fell back (1-D pooling, wav2vec2's GroupNorm exported
as InstanceNormalization, pixel shuffles, upsampling) are also compiled and run against
ONNX Runtime.
"""

from __future__ import annotations

import importlib
import io
import warnings

import numpy as np
import pytest

import mdsl
from examples import bert, control_flow, detection_preprocess, resnet_block
from mdsl.frontends.onnx_light_models import load_light_model, with_random_weights
from mdsl.targets.c.backend import plan_variant

# all but the three whose large fully connected weights take seconds to draw and pack
# (AlexNet, ZFNet, VGG-19: 5-8 s to draw random weights and 2-3 s to pack the Gemm
# weights of each; Conv, LRN, pools, Gemm, ops the others cover)
LIGHT = ["densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet"]


def callbacks(g: mdsl.Graph) -> list[str]:
    plan = plan_variant(mdsl.optimize(g, level=2), {})
    return [f"{n.name} ({n.op_type})" for n in plan.callbacks]


@pytest.mark.parametrize("name", LIGHT)
def test_light_models_have_no_callbacks(name):
    from mdsl.frontends.onnx_import import import_model

    model = with_random_weights(load_light_model(name))  # else weights are ConstantOfShape
    assert callbacks(import_model(model, label=name)) == []


@pytest.mark.parametrize(
    "build",
    [
        bert.build,
        resnet_block.build,
        lambda: bert.bert(1, 32, 2, masked=True, vocab=50),
        control_flow.build,  # Resize over symbolic H x W inside If branches
        detection_preprocess.build,
    ],
)
def test_examples_have_no_callbacks(build):
    assert callbacks(build()) == []


def test_the_custom_op_example_has_no_callbacks_once_its_expr_binding_is_in_place():
    """QLinearMatMul runs its C binding; QuantizeSymmetric its expression (bound as the
    example's main does)."""
    from tests.op_sandbox import restored_registries

    with restored_registries():
        from examples import custom_op

        importlib.reload(custom_op)
        custom_op.bind_expr_quantize()
        assert callbacks(custom_op.build()) == []


def test_the_onnx_import_example_has_no_callbacks(tmp_path):
    pytest.importorskip("torch")
    from examples import onnx_import

    path = tmp_path / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_import.export_onnx(onnx_import.torch_model(), path)
    assert callbacks(mdsl.frontends.onnx.load(str(path))) == []


# -- PyTorch models with the ops of the zoo -------------------------------------------------------
def _audio_net():
    """1-D convolutions and max pooling (the zoo's keyword spotter, smaller)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv1d(1, 8, 9, stride=4),
        nn.BatchNorm1d(8),
        nn.ReLU(),
        nn.MaxPool1d(4),
        nn.Conv1d(8, 8, 3),
        nn.AvgPool1d(3, stride=2, padding=1),
    ), (1, 1, 400)


def _wav2vec2_front():
    """wav2vec2's feature extractor: conv, GroupNorm with a group per channel, GELU."""
    from torch import nn

    return nn.Sequential(nn.Conv1d(1, 16, 10, stride=5), nn.GroupNorm(16, 16), nn.GELU()), (
        2,
        1,
        320,
    )


def _pixel_shuffle():
    """A super-resolution tail: DepthToSpace, and its inverse SpaceToDepth."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 12, 3, padding=1), nn.PixelShuffle(2), nn.PixelUnshuffle(2), nn.ReLU()
    ), (1, 3, 8, 8)


def _upsampling_head():
    """A segmentation / detection neck: bilinear and nearest upsampling (Resize)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.Upsample(size=(9, 7), mode="bicubic", align_corners=True),
    ), (1, 3, 5, 6)


@pytest.mark.parametrize("make", [_audio_net, _wav2vec2_front, _pixel_shuffle, _upsampling_head])
def test_exported_models_compile_without_callbacks_and_match_onnxruntime(make):
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from mdsl.frontends import onnx as mo

    torch.manual_seed(0)
    module, shape = make()
    module.eval()
    x = torch.randn(*shape)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), buffer, input_names=["x"], output_names=["y"],
                          dynamo=False, opset_version=17)  # fmt: skip
    exe = mdsl.compile(mo.load(buffer.getvalue()), backend="c")
    assert exe.plan.fallbacks == []
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(exe(x=x.numpy())["y"], want, rtol=1e-4, atol=1e-5)
