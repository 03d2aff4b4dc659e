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


def _sequence_io_model():
    """A sequence input `xs` (elements float[N], sizes their own) mapped by SequenceMap
    (each element times t's sum), a Loop carrying a sequence (one piece per iteration),
    and sequence outputs."""
    body = oh.make_graph(
        [
            oh.make_node("ReduceSum", ["t_in"], ["total"], keepdims=0),
            oh.make_node("Mul", ["e", "total"], ["scaled"]),
        ],
        "map_body",
        [
            oh.make_tensor_value_info("e", onnx.TensorProto.FLOAT, ["N"]),
            oh.make_tensor_value_info("t_in", onnx.TensorProto.FLOAT, [3]),
        ],
        [oh.make_tensor_value_info("scaled", onnx.TensorProto.FLOAT, ["N"])],
    )
    loop_body = oh.make_graph(
        [
            oh.make_node("Identity", ["c_in"], ["c_out"]),
            oh.make_node("Add", ["i", "one"], ["end"]),
            oh.make_node("Unsqueeze", ["end", "zero_axis"], ["ends"]),
            oh.make_node("Slice", ["t", "starts", "ends"], ["piece"]),
            oh.make_node("SequenceInsert", ["acc_in", "piece"], ["acc_out"]),
        ],
        "loop_body",
        [
            oh.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("c_in", onnx.TensorProto.BOOL, []),
            oh.make_tensor_sequence_value_info("acc_in", onnx.TensorProto.FLOAT, None),
        ],
        [
            oh.make_tensor_value_info("c_out", onnx.TensorProto.BOOL, []),
            oh.make_tensor_sequence_value_info("acc_out", onnx.TensorProto.FLOAT, None),
        ],
    )
    seq = oh.make_tensor_sequence_value_info
    nodes = [
        oh.make_node("SequenceMap", ["xs", "t"], ["ys"], body=body),
        oh.make_node("SequenceEmpty", [], ["empty"]),
        oh.make_node("Loop", ["three", "yes", "empty"], ["prefixes"], body=loop_body),
        oh.make_node("SequenceLength", ["xs"], ["count"]),
    ]
    inits = [
        _int64("three", 3),
        _int64("one", 1),
        _int64("zero_axis", 0),
        onnx.numpy_helper.from_array(np.array([0], np.int64), "starts"),
        onnx.numpy_helper.from_array(np.array(True), "yes"),
    ]
    graph = oh.make_graph(
        nodes,
        "sequence_io",
        [seq("xs", onnx.TensorProto.FLOAT, ["N"]), oh.make_tensor_value_info("t", 1, [3])],
        [
            seq("ys", onnx.TensorProto.FLOAT, ["N"]),
            seq("prefixes", onnx.TensorProto.FLOAT, None),
            oh.make_tensor_value_info("count", onnx.TensorProto.INT64, []),
        ],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["python", "c"])
def test_sequence_inputs_outputs_sequence_map_and_loops_match_onnxruntime(backend):
    import onnxruntime as ort

    model = _sequence_io_model()
    g = mdsl.frontends.onnx.load(model, structure={"xs": 3})
    assert sorted(g.inputs) == ["t", "xs.0", "xs.1", "xs.2"]
    run = (
        (lambda f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend).run
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for sizes in [(4, 1, 7), (2, 2, 2)]:  # each element has a size of its own
        feeds = {
            "xs": [rng.standard_normal(n).astype(np.float32) for n in sizes],
            "t": np.array([1.0, 2.0, 0.5], np.float32),
        }
        got = mdsl.frontends.onnx.pack_outputs(
            run(mdsl.frontends.onnx.flatten_feeds(feeds)), ["ys", "prefixes"]
        )
        want = dict(zip(["ys", "prefixes", "count"], session.run(None, feeds)))
        assert len(got["ys"]) == 3 and len(got["prefixes"]) == 3
        for name in ("ys", "prefixes"):
            for a, b in zip(got[name], want[name]):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        assert int(got["count"]) == 3


def test_a_sequence_input_without_its_length_is_a_graph_error_saying_how_to_give_it():
    with pytest.raises(mdsl.GraphError, match=r"structure=\{'xs': length\}"):
        mdsl.frontends.onnx.load(_sequence_io_model())


def test_a_loop_carrying_a_sequence_needs_its_trip_count_at_import():
    model = _sequence_io_model()
    model.graph.initializer.remove(next(i for i in model.graph.initializer if i.name == "three"))
    model.graph.input.append(oh.make_tensor_value_info("three", onnx.TensorProto.INT64, []))
    with pytest.raises(mdsl.GraphError, match="trip count"):
        mdsl.frontends.onnx.load(model, structure={"xs": 2})


def _optional_model():
    """y = x + 1 when the optional input holds x, else a constant; has = OptionalHasElement."""
    then = oh.make_graph(
        [
            oh.make_node("OptionalGetElement", ["opt"], ["x"]),
            oh.make_node("Add", ["x", "one"], ["a"]),
        ],
        "present",
        [],
        [oh.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2])],
    )
    other = oh.make_graph(
        [oh.make_node("Identity", ["fallback"], ["b"])],
        "absent",
        [],
        [oh.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [2])],
    )
    optional = oh.make_optional_type_proto(oh.make_tensor_type_proto(onnx.TensorProto.FLOAT, [2]))
    graph = oh.make_graph(
        [
            oh.make_node("OptionalHasElement", ["opt"], ["has"]),
            oh.make_node("If", ["has"], ["y"], then_branch=then, else_branch=other),
        ],
        "optional",
        [oh.make_value_info("opt", optional)],
        [
            oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info("has", onnx.TensorProto.BOOL, []),
        ],
        [
            onnx.numpy_helper.from_array(np.ones((), np.float32), "one"),
            onnx.numpy_helper.from_array(np.array([7.0, 8.0], np.float32), "fallback"),
        ],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("present", [True, False])
def test_optional_inputs_are_fixed_at_import_and_match_onnx_reference(present):
    from onnx.reference import ReferenceEvaluator

    model = _optional_model()
    x = np.array([1.0, -2.0], np.float32)
    g = mdsl.frontends.onnx.load(model, structure={} if present else {"opt": None})
    feeds = {"opt": x if present else None}
    got = mdsl.compile(g, backend="c").run(mdsl.frontends.onnx.flatten_feeds(feeds))
    want_y, want_has = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got["y"], want_y)
    assert bool(got["has"]) is bool(want_has) is present
