"""ONNX sequence ops whose structure is known at import time (mdsl.frontends.onnx_sequences),
against ONNX Runtime on the interpreter and on C."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import mdsl


def _int64(name, value):
    return onnx.numpy_helper.from_array(np.array(value, np.int64), name)


def _model():
    """The pieces of x split along axis 1, edited and put back together, as exporters
    write torch's split / unbind with cat / stack."""
    nodes = [
        oh.make_node("SplitToSequence", ["x", "sizes"], ["pieces"], axis=1),
        oh.make_node("SequenceAt", ["pieces", "one"], ["middle"]),
        oh.make_node("Relu", ["middle"], ["middle_relu"]),
        oh.make_node("SequenceInsert", ["pieces", "middle_relu", "zero"], ["more"]),
        oh.make_node("SequenceErase", ["more", "minus_one"], ["edited"]),
        oh.make_node("SequenceLength", ["edited"], ["count"]),
        oh.make_node("ConcatFromSequence", ["edited"], ["joined"], axis=1),
        oh.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        oh.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=-1, new_axis=1),
        oh.make_node("SequenceEmpty", [], ["empty"]),
        oh.make_node("SequenceInsert", ["empty", "x"], ["one_x"]),
        oh.make_node("SequenceConstruct", ["x", "x"], ["two_x"]),
        oh.make_node("SequenceInsert", ["two_x", "middle_relu"], ["three"]),
        oh.make_node("SequenceAt", ["one_x", "zero"], ["x_again"]),
        oh.make_node("SequenceAt", ["three", "minus_one"], ["last"]),
        oh.make_node("Add", ["x_again", "x"], ["doubled"]),
        oh.make_node("Mul", ["last", "last"], ["squared"]),
    ]
    inits = [
        _int64("sizes", [1, 2, 3]),
        _int64("one", 1),
        _int64("zero", 0),
        _int64("minus_one", -1),
    ]
    graph = oh.make_graph(
        nodes,
        "sequences",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 6])],
        [
            oh.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
            for name in ("joined", "stacked", "doubled", "squared")
        ]
        + [oh.make_tensor_value_info("count", onnx.TensorProto.INT64, None)],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["python", "c"])
def test_sequence_ops_known_at_import_time_match_onnxruntime(backend):
    import onnxruntime as ort

    model = _model()
    g = mdsl.frontends.onnx.load(model)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    got = (
        mdsl.interpret(g, {"x": x})
        if backend == "python"
        else mdsl.compile(g, backend=backend)(x=x)
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    for name, want in zip(names, session.run(None, {"x": x})):
        np.testing.assert_allclose(got[name], want, rtol=1e-6)


def test_a_sequence_graph_output_is_a_clear_graph_error():
    graph = oh.make_graph(
        [oh.make_node("SplitToSequence", ["x"], ["pieces"], axis=0)],
        "seq_out",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("pieces", onnx.TensorProto.FLOAT, None)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(mdsl.GraphError, match="is a sequence"):
        mdsl.frontends.onnx.load(model)
