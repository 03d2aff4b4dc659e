"""Old and odd ONNX models: old opsets, external data, custom domains, ops defined by
ONNX functions, ops mdsl lacks over import-time values (docs/dynamic-shapes.md)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mdsl
from mdsl.frontends import onnx as mo
from mdsl.ir.tensor_type import TensorType
from tests.frontends.onnx_models import init, model, reference, value
from tests.op_sandbox import restored_registries

RNG = np.random.default_rng(0)


def test_an_opset_7_model_is_upgraded_with_a_warning_and_runs():
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = model(nodes, [value("x", [2, 3]), value("b", [3])], [value("y", None)], opset=7)
    with pytest.warns(UserWarning, match="opset 7 upgraded to opset 9"):
        g = mo.load(m)
    x, b = RNG.standard_normal((2, 3), np.float32), RNG.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x, "b": b})["y"], np.maximum(x + b, 0))


def _external_model(tmp_path, location: str):
    weight = numpy_weight = RNG.standard_normal((4, 4)).astype(np.float32)
    tensor = onnx.numpy_helper.from_array(weight, "w")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [value("x", [2, 4])],
        [value("y", None)],
        initializers=[tensor],
    )
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir(exist_ok=True)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return str(path), numpy_weight


def test_external_data_loads_from_the_models_directory(tmp_path):
    path, weight = _external_model(tmp_path, "weights.bin")
    weight.tofile(os.path.join(os.path.dirname(path), "weights.bin"))
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(
        mdsl.interpret(mo.load(path), {"x": x})["y"], x @ weight, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_outside_the_models_directory_is_a_graph_error(tmp_path, location):
    path, weight = _external_model(tmp_path, location)
    weight.tofile(tmp_path / "secret.bin")  # exists, but outside the model's directory
    with pytest.raises(mdsl.GraphError, match="outside the model's directory"):
        mo.load(path)


def test_a_symlink_out_of_the_models_directory_is_a_graph_error(tmp_path):
    path, weight = _external_model(tmp_path, "link.bin")
    weight.tofile(tmp_path / "secret.bin")
    os.symlink(tmp_path / "secret.bin", os.path.join(os.path.dirname(path), "link.bin"))
    with pytest.raises(mdsl.GraphError, match="outside the model's directory"):
        mo.load(path)


def test_missing_external_data_is_a_graph_error(tmp_path):
    path, _ = _external_model(tmp_path, "absent.bin")
    with pytest.raises(mdsl.GraphError, match=r"'absent\.bin' is missing"):
        mo.load(path)


def _fancy_model():
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.acme", alpha=3.0)
    m = model([node], [value("x", [2, 3])], [value("y", None)])
    m.opset_import.append(helper.make_opsetid("com.acme", 1))
    return m


def test_custom_domains_map_to_user_ops():
    with restored_registries():

        @mdsl.op_proto(
            "FancyScale",
            inputs={"x": "float"},
            outputs={"y": "float"},
            attrs={"alpha": mdsl.Attr(float)},
        )
        def fancy_op(x, *, alpha):
            return TensorType(x.shape, x.dtype)

        mdsl.register_op_impl("FancyScale", lambda x, *, alpha: (x * alpha).astype(x.dtype))
        g = mo.load(_fancy_model(), custom_ops={"com.acme": {"FancyOp": fancy_op}})
        assert [n.op_type for n in g.nodes][1] == "FancyScale"
        x = RNG.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], 3.0 * x)


def test_custom_ops_must_be_mdsl_ops():
    with pytest.raises(mdsl.GraphError, match=r"cannot import the model.*com\.acme\.FancyOp"):
        mo.load(_fancy_model())
    with pytest.raises(mdsl.GraphError, match="is not an mdsl op"):
        mo.load(_fancy_model(), custom_ops={"com.acme": {"FancyOp": "NoSuchOp"}})


def test_ops_defined_by_onnx_functions_are_expanded():
    nodes = [
        helper.make_node(
            "NegativeLogLikelihoodLoss", ["x", "t"], ["y"], name="/head/loss", reduction="mean"
        )
    ]
    m = model(nodes, [value("x", [3, 5]), value("t", [3], TensorProto.INT64)], [value("y", None)])
    g = mo.load(m)
    assert any(layer.startswith("head/loss") for layer in g.layers)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    t = np.array([0, 4, 2], np.int64)
    (want,) = reference(m, {"x": x, "t": t})
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x, "t": t})["y"], want, rtol=1e-6)


def test_an_op_mdsl_lacks_over_import_time_values_is_evaluated():
    """The Swin pattern: a value built from constants by a chain that ends in an op mdsl
    lacks (Det) is evaluated at import time, its producers (ScatterND) included."""
    data = 2 * np.eye(4, dtype=np.float32)
    indices = np.array([[0], [2]], np.int64)
    updates = np.array([[2, 1, 0, 0], [0, 1, 2, 1]], np.float32)
    nodes = [
        helper.make_node("ScatterND", ["data", "idx", "upd"], ["matrix"]),
        helper.make_node("Det", ["matrix"], ["det"]),
        helper.make_node("Add", ["x", "det"], ["y"]),
    ]
    m = model(
        nodes,
        [value("x", [4, 4])],
        [value("y", None)],
        initializers=[init("data", data), init("idx", indices), init("upd", updates)],
    )
    g = mo.load(m)
    assert not {"ScatterND", "Det"} & {n.op_type for n in g.nodes}
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    matrix = np.array([[2, 1, 0, 0], [0, 2, 0, 0], [0, 1, 2, 1], [0, 0, 0, 2]], np.float64)
    want = x + np.float32(np.linalg.det(matrix))
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], want, rtol=1e-6)
