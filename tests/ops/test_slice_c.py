"""ONNX Slice with starts/ends (DynamicSlice) or axes/steps too (DynamicSliceAxes) read at
run time, compiled for C (`mdsl/ops/runtime_sizes.c`): no callback, results equal to the
interpreter's, ONNX's reference evaluator's and ONNX Runtime's over negative indices, clamping, steps of +-1 and +-2,
INT64_MAX/INT64_MIN ends, empty results, int and float dtypes; bad axes and steps fail
the run naming the node.

One corner differs between ONNX's reference and ONNX Runtime: a start before the axis
stepping backward (x[-10:-20:-1] of 4 elements) is empty in the reference (numpy, and
mdsl's static Slice) but one element in ONNX Runtime (the spec's text clamps the start to
0); mdsl follows the reference there."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

import mdsl
from mdsl.frontends.onnx_import import import_model

BIG, SMALL = np.iinfo(np.int64).max, np.iinfo(np.int64).min
ONNX_TYPES = {np.float32: onnx.TensorProto.FLOAT, np.int64: onnx.TensorProto.INT64}


def _slice_model(shape, dtype, count: int, run_time_axes: bool) -> onnx.ModelProto:
    """y = Slice(x, starts, ends, axes, steps), all four fed, or only starts and ends."""
    index = ["starts", "ends", "axes", "steps"] if run_time_axes else ["starts", "ends"]
    inputs = [oh.make_tensor_value_info("x", ONNX_TYPES[dtype], shape)]
    inputs += [oh.make_tensor_value_info(n, onnx.TensorProto.INT64, [count]) for n in index]
    graph = oh.make_graph(
        [oh.make_node("Slice", ["x", *index], ["y"])],
        "slice",
        inputs,
        [oh.make_tensor_value_info("y", ONNX_TYPES[dtype], None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def _native(model) -> tuple[mdsl.Graph, object]:
    g = import_model(model, label="slice")
    assert {n.op_type for n in g} & {"DynamicSlice", "DynamicSliceAxes"}
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    return g, exe


def _check(model, feeds_list, *, runtime_agrees: bool = True) -> None:
    g, exe = _native(model)
    reference = ReferenceEvaluator(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        (want,) = reference.run(None, feeds)
        wanted = [want, session.run(None, feeds)[0]] if runtime_agrees else [want]
        got, ref = exe(**feeds)["y"], mdsl.interpret(g, feeds)["y"]
        for expected in wanted:
            assert got.shape == expected.shape and ref.shape == expected.shape, feeds
            np.testing.assert_array_equal(got, expected, err_msg=str(feeds))
            np.testing.assert_array_equal(ref, expected, err_msg=str(feeds))


# (starts, ends, axes, steps) over a (4, 5, 3) input
SLICES = [
    ((1, -4), (3, 100), (0, 1), (1, 1)),  # negative start, end clamped
    ((0, 0), (BIG, BIG), (0, 2), (1, 1)),  # INT64_MAX: to the end
    ((-1, 4), (SMALL, SMALL), (0, 1), (-1, -1)),  # INT64_MIN: backward to the start
    ((3, 1), (1, 4), (-3, -1), (1, 1)),  # negative axes; an empty result
    ((-1,), (-100,), (1,), (-2,)),  # step -2, end clamped
    ((0,), (5,), (1,), (2,)),  # step 2
    ((10, -10), (-10, 10), (0, 1), (-1, 1)),  # out-of-range starts both ways
    ((1, 0, 2), (4, 5, 0), (2, 0, 1), (2, -1, -2)),  # every axis, an empty axis
    ((-10,), (-20,), (0,), (-1,)),  # start before the axis stepping back: ONNX Runtime differs
]
RUNTIME_DIFFERS = SLICES[-1]


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("run_time_axes", [False, True])
def test_slice_read_at_run_time_equals_the_interpreter_and_onnx_runtime(dtype, run_time_axes):
    x = np.arange(60).reshape(4, 5, 3).astype(dtype)
    for starts, ends, axes, steps in SLICES:
        n = len(starts)
        model = _slice_model([4, 5, 3], dtype, n, run_time_axes)
        feeds = {"x": x, "starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
        if run_time_axes:
            feeds |= {"axes": np.array(axes, np.int64), "steps": np.array(steps, np.int64)}
            _check(model, [feeds], runtime_agrees=(starts, ends, axes, steps) != RUNTIME_DIFFERS)
            continue
        nodes = model.graph.node
        nodes[0].input.extend(["axes", "steps"])
        model.graph.initializer.extend(
            [
                onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"),
                onnx.numpy_helper.from_array(np.array(steps, np.int64), "steps"),
            ]
        )
        _check(model, [feeds], runtime_agrees=(starts, ends, axes, steps) != RUNTIME_DIFFERS)


def test_one_build_serves_every_slice_of_a_run_time_length():
    model = _slice_model([4, 5, 3], np.float32, 2, run_time_axes=True)
    x = np.arange(60, dtype=np.float32).reshape(4, 5, 3)
    feeds_list = [
        {"x": x, "starts": np.array(s), "ends": np.array(e), "axes": np.array(a),
         "steps": np.array(t)}
        for s, e, a, t in SLICES if len(s) == 2
    ]  # fmt: skip
    assert len(feeds_list) == 5
    _check(model, feeds_list)


@pytest.mark.parametrize(
    ("axes", "steps"), [((0, 0), (1, 1)), ((0, 3), (1, 1)), ((0, -4), (1, 1)), ((0, 1), (1, 0))]
)
def test_bad_run_time_axes_or_steps_fail_naming_the_node(axes, steps):
    model = _slice_model([4, 5, 3], np.float32, 2, run_time_axes=True)
    g, exe = _native(model)
    (node,) = [n for n in g if n.op_type == "DynamicSliceAxes"]
    feeds = {
        "x": np.zeros((4, 5, 3), np.float32),
        "starts": np.array([0, 0]),
        "ends": np.array([2, 2]),
        "axes": np.array(axes),
        "steps": np.array(steps),
    }
    for run in (lambda: exe(**feeds), lambda: mdsl.interpret(g, feeds)):
        with pytest.raises(mdsl.ExecutionError, match=node.name):
            run()


def test_a_known_length_not_met_fails_the_c_run_naming_the_node():
    with mdsl.Graph("window") as g:
        x = g.input("x", (5, 2), "int32")
        i = g.input("i", (1,), "int64")
        g.output(mdsl.ops.dynamic_slice(x, i, i + 1, lengths=(1,), name="window"), "y")
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    x = np.arange(10, dtype=np.int32).reshape(5, 2)
    np.testing.assert_array_equal(exe(x=x, i=np.array([3]))["y"], x[3:4])
    with pytest.raises(mdsl.ExecutionError, match="window"):
        exe(x=x, i=np.array([5]))  # x[5:6] is empty, not of length 1


ONNX_SLICE_CASES = [
    "test_slice",
    "test_slice_default_axes",
    "test_slice_default_steps",
    "test_slice_end_out_of_bounds",
    "test_slice_neg",
    "test_slice_neg_steps",
    "test_slice_negative_axes",
    "test_slice_start_out_of_bounds",
]


@pytest.mark.parametrize("name", ONNX_SLICE_CASES)
def test_onnx_slice_cases_with_run_time_indices_run_natively_on_c(name):
    """ONNX's own Slice cases, their index inputs kept as graph inputs (the conformance
    runner binds them as constants: a static Slice), checked against their outputs."""
    from mdsl.frontends.onnx_conformance import as_array, collect_cases, compare_outputs
    from mdsl.frontends.onnx_import import mdsl_name

    (case,) = collect_cases([name])
    _, exe = _native(case.model)
    declared = [i.name for i in case.model.graph.input]
    for inputs, expected in case.data_sets:
        feeds = {mdsl_name(n): as_array(v) for n, v in zip(declared, inputs)}
        names = [mdsl_name(o.name) for o in case.model.graph.output]
        assert compare_outputs(names, exe(**feeds), expected, case.rtol, case.atol) is None
