"""QuantizeLinear to float8 with saturate=1 (the default: clipped to the finite range)
and saturate=0 (beyond the range: inf, or NaN for the types without inf), against ONNX's
reference evaluator (ONNX Runtime's Python API cannot return float8 arrays); exported
back with the attribute."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from mdsl.frontends import onnx as mo  # noqa: E402

X = np.array([0.0, 1.5, -3.25, 300.0, 1000.0, -70000.0, 1e6], np.float32)
FLOAT8 = {"e4m3fn": TensorProto.FLOAT8E4M3FN, "e5m2": TensorProto.FLOAT8E5M2}


def _model(elem_type: int, saturate: int):
    zero = helper.make_tensor("zero", elem_type, [], [0.0])
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [0.5])
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"], saturate=saturate)
    graph = helper.make_graph(
        [node],
        "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info("y", elem_type, X.shape)],
        initializer=[zero, scale],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("kind", sorted(FLOAT8))
@pytest.mark.parametrize("backend", ["interpreter", "c"])
def test_float8_quantization_saturates_as_asked(kind, saturate, backend):
    model = _model(FLOAT8[kind], saturate)
    want = ReferenceEvaluator(model).run(None, {"x": X})[0].astype(np.float32)
    g = mo.load(model.SerializeToString())
    got = (
        mdsl.interpret(g, {"x": X})
        if backend == "interpreter"
        else mdsl.compile(g, backend="c")(x=X)
    )
    np.testing.assert_array_equal(got["y"].astype(np.float32), want)
    assert np.isfinite(want).all() == bool(saturate)  # the data reaches beyond the range


def test_saturate_0_is_exported_and_reimported():
    g = mo.load(_model(TensorProto.FLOAT8E5M2, 0).SerializeToString())
    exported = mo.export(g, opset=21)
    node = next(n for n in exported.graph.node if n.op_type == "QuantizeLinear")
    assert {a.name: a.i for a in node.attribute}.get("saturate") == 0
    again = mo.load(exported.SerializeToString())
    y = mdsl.interpret(again, {"x": X})["y"].astype(np.float32)
    assert np.isinf(y[-1])
