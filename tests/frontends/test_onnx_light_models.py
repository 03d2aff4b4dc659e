"""The light models shipped with onnx (ResNet-50, DenseNet-121, ...): import, optimize,
run on the interpreter, match ONNX Runtime on random weights and inputs."""

from __future__ import annotations

import pytest

from mdsl.frontends.onnx_light_models import check_light_model, light_model_names

NAMES = light_model_names()
# large fully connected weights (up to 400 MB for VGG-19) or many nodes: seconds each
HEAVY = {"vgg19", "zfnet512", "bvlc_alexnet", "densenet121"}


def test_the_installed_onnx_ships_the_light_models():
    assert {"resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet",
            "squeezenet", "vgg19", "bvlc_alexnet", "zfnet512"} <= set(NAMES)  # fmt: skip


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in NAMES]
)
def test_light_model_matches_onnxruntime(name):
    result = check_light_model(name)
    assert result.ok, result.error
    assert result.imported_nodes >= result.onnx_nodes  # inputs, constants, outputs added
    assert 0 < result.optimized_nodes <= result.imported_nodes
    assert result.scale > 0.1  # the random weights give informative logits
    assert result.matches, result
