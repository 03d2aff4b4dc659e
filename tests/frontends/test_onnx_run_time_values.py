"""ONNX inputs mdsl holds as attributes, fed at run time (docs/dynamic-shapes.md, value
dims): ONNX's own test cases imported as they are (their size inputs stay graph inputs,
unlike the conformance runner, which binds them as initializers) and checked against
the cases' expected outputs, on the interpreter and on C."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import mdsl
from mdsl.frontends.onnx_conformance import as_array, collect_cases, compare_outputs
from mdsl.frontends.onnx_import import import_model, mdsl_name
from mdsl.ir.rewrite import all_graphs

ON_INTERPRETER = [
    "test_range_float_type_positive_delta",
    "test_range_int32_type_negative_delta",
    "test_tile",
    "test_onehot_with_axis",
    "test_onehot_negative_indices",
    "test_top_k",
    "test_top_k_smallest",
    "test_expand_dim_changed",
    "test_constantofshape_float_ones",
    "test_hannwindow_symmetric",
    "test_center_crop_pad_crop_and_pad",
    "test_affine_grid_2d",
    "test_affine_grid_3d",
    "test_loop11",  # x[i:i + 1] in a Loop body, stacked as a scan output
]
ON_C = [
    "test_range_float_type_positive_delta",
    "test_tile",
    "test_top_k",
    "test_hannwindow",
    "test_affine_grid_3d",  # a DynamicReshape to value dims, its buffers sized by them
]


def _run_case(name: str, backend: str) -> None:
    (case,) = collect_cases([name])
    initialized = {i.name for i in case.model.graph.initializer}
    declared = [i.name for i in case.model.graph.input if i.name not in initialized]
    g = import_model(case.model, label=case.name)
    nodes = [n for sub in all_graphs(g) for n in sub]
    assert any(n.op_type in ("ValueDims", "DynamicSlice") for n in nodes), "sizes known at import"
    exe = None if backend == "python" else mdsl.compile(g, backend=backend)
    for inputs, expected in case.data_sets:
        feeds = {mdsl_name(n): as_array(v) for n, v in zip(declared, inputs)}
        out = mdsl.interpret(g, feeds) if exe is None else exe(**feeds)
        names = [mdsl_name(o.name) for o in case.model.graph.output]
        assert compare_outputs(names, out, expected, case.rtol, case.atol) is None


@pytest.mark.parametrize("name", ON_INTERPRETER)
def test_onnx_cases_with_sizes_fed_at_run_time_match_on_the_interpreter(name):
    _run_case(name, "python")


@pytest.mark.parametrize("name", ON_C)
def test_onnx_cases_with_sizes_fed_at_run_time_match_on_c(name):
    _run_case(name, "c")


def _range_model():
    """y = Range(0, n, 1) * 2, n a run-time int64 scalar; t = Tile(x, repeats)."""
    nodes = [
        oh.make_node("Range", ["zero", "n", "one"], ["r"]),
        oh.make_node("Mul", ["r", "two"], ["y"]),
        oh.make_node("Tile", ["x", "repeats"], ["t"]),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array(v, np.int64), name)
        for name, v in (("zero", 0), ("one", 1), ("two", 2))
    ]
    graph = oh.make_graph(
        nodes,
        "range",
        [
            oh.make_tensor_value_info("n", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info("repeats", onnx.TensorProto.INT64, [1]),
        ],
        [
            oh.make_tensor_value_info("y", onnx.TensorProto.INT64, None),
            oh.make_tensor_value_info("t", onnx.TensorProto.FLOAT, None),
        ],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["python", "c"])
def test_one_compile_serves_every_run_time_size_and_matches_onnxruntime(backend):
    import onnxruntime as ort

    model = _range_model()
    g = mdsl.frontends.onnx.load(model)
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([1.0, 2.0], np.float32)
    for n, reps in [(5, 3), (0, 1), (2, 0)]:
        feeds = {"n": np.array(n, np.int64), "x": x, "repeats": np.array([reps], np.int64)}
        want = dict(zip(["y", "t"], session.run(None, feeds)))
        got = run(**feeds)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])


@pytest.mark.parametrize("backend", ["python", "c"])
def test_a_run_time_size_that_is_negative_is_an_execution_error_naming_the_node(backend):
    g = mdsl.frontends.onnx.load(_range_model())
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    feeds = {"n": np.array(3, np.int64), "x": np.ones(2, np.float32), "repeats": np.array([-2])}
    with pytest.raises(mdsl.ExecutionError, match="negative or too large") as e:
        run(**feeds)
    assert "Tile" in e.value.node


def _scan_loop_model(trip_count: int | None):
    """A Loop carrying y (y += x each iteration) that stacks y * 2 per iteration (a scan
    output); trip count M an initializer, or a graph input when None."""
    body = oh.make_graph(
        [
            oh.make_node("Identity", ["cond_in"], ["cond_out"]),
            oh.make_node("Add", ["y_in", "x"], ["y_out"]),
            oh.make_node("Mul", ["y_out", "two"], ["scan_out"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("y_in", onnx.TensorProto.FLOAT, [2]),
        ],
        [
            oh.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("y_out", onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info("scan_out", onnx.TensorProto.FLOAT, [2]),
        ],
    )
    inits = [
        onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        onnx.numpy_helper.from_array(np.array(True), "go"),
    ]
    inputs = [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])]
    if trip_count is None:
        inputs.append(oh.make_tensor_value_info("M", onnx.TensorProto.INT64, []))
    else:
        inits.append(onnx.numpy_helper.from_array(np.array(trip_count, np.int64), "M"))
    inits.append(onnx.numpy_helper.from_array(np.zeros(2, np.float32), "y0"))
    graph = oh.make_graph(
        [oh.make_node("Loop", ["M", "go", "y0"], ["y", "rows"], body=body)],
        "scan",
        inputs,
        [
            oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info("rows", onnx.TensorProto.FLOAT, None),
        ],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _ort(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(["y", "rows"], session.run(None, feeds)))


@pytest.mark.parametrize("backend", ["python", "c"])
def test_loop_scan_outputs_stack_one_row_per_iteration_as_onnxruntime_does(backend):
    model = _scan_loop_model(4)
    g = mdsl.frontends.onnx.load(model)
    x = np.array([1.0, -0.5], np.float32)
    got = (
        mdsl.interpret(g, {"x": x})
        if backend == "python"
        else mdsl.compile(g, backend=backend)(x=x)
    )
    want = _ort(model, {"x": x})
    assert got["rows"].shape == (4, 2)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6)


@pytest.mark.parametrize("backend", ["python", "c", "numba"])
def test_a_loop_scan_with_a_run_time_trip_count_is_planned_per_call(backend):
    model = _scan_loop_model(None)
    g = mdsl.frontends.onnx.load(model)
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    x = np.array([1.0, 2.0], np.float32)
    for m in (5, 0, 1, 7, -3):  # a negative trip count runs no iteration, as in ORT
        feeds = {"x": x, "M": np.array(m, np.int64)}
        got, want = run(**feeds), _ort(model, feeds)
        assert got["rows"].shape == (max(m, 0), 2)
        np.testing.assert_allclose(got["rows"], want["rows"].reshape(-1, 2), rtol=1e-6)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)


def _if_model():
    """z = If(c, then: a 2x3 constant, else: x (N x 3)) squared: the branches' shapes differ."""
    then = oh.make_graph(
        [
            oh.make_node(
                "Constant",
                [],
                ["a"],
                value=onnx.numpy_helper.from_array(np.full((2, 3), 1.5, np.float32)),
            )
        ],
        "then",
        [],
        [oh.make_tensor_value_info("a", onnx.TensorProto.FLOAT, None)],
    )
    other = oh.make_graph(
        [oh.make_node("Identity", ["x"], ["b"])],
        "else",
        [],
        [oh.make_tensor_value_info("b", onnx.TensorProto.FLOAT, None)],
    )
    graph = oh.make_graph(
        [
            oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
            oh.make_node("Mul", ["y", "y"], ["z"]),
        ],
        "if_shapes",
        [
            oh.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3]),
        ],
        [oh.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["python", "c"])
def test_if_branches_of_different_shapes_match_onnxruntime(backend):
    model = _if_model()
    g = mdsl.frontends.onnx.load(model)
    assert not isinstance(g.outputs["z"].shape[0], int)
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for c, n in [(True, 5), (False, 5), (False, 1)]:
        feeds = {"c": np.array(c), "x": np.arange(3 * n, dtype=np.float32).reshape(n, 3)}
        (want,) = session.run(None, feeds)
        np.testing.assert_array_equal(run(**feeds)["z"], want)


def _pad_reshape_model():
    """z = Reshape(Pad(x, pads), s) with pads (negative ones crop) and s fed at run time."""
    nodes = [
        oh.make_node("Pad", ["x", "pads", "fill"], ["y"], mode="constant"),
        oh.make_node("Reshape", ["y", "s"], ["z"]),
    ]
    graph = oh.make_graph(
        nodes,
        "pad_reshape",
        [
            oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4]),
            oh.make_tensor_value_info("pads", onnx.TensorProto.INT64, [4]),
            oh.make_tensor_value_info("s", onnx.TensorProto.INT64, [2]),
        ],
        [oh.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(9.0, np.float32), "fill")],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["python", "c"])
def test_run_time_pads_that_crop_and_a_run_time_reshape_match_onnxruntime(backend):
    import onnxruntime as ort

    model = _pad_reshape_model()
    g = mdsl.frontends.onnx.load(model)
    assert {"DynamicCrop", "DynamicReshape"} <= {n.op_type for n in g}
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    if backend == "c":  # ValueDims, Pad, DynamicCrop and DynamicReshape: all native
        assert run.plan.fallbacks == []
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for pads, shape in [([1, -1, 0, 2], [-1, 5]), ([-1, 0, -1, -2], [2, -1]), ([0] * 4, [0, 4])]:
        feeds = {"x": x, "pads": np.array(pads), "s": np.array(shape)}
        (want,) = session.run(None, feeds)
        np.testing.assert_array_equal(run(**feeds)["z"], want)


@pytest.mark.parametrize("backend", ["python", "c"])
@pytest.mark.parametrize(
    ("pads", "shape", "message"),
    [
        ([-2, 0, -2, 0], [-1, 4], "makes the dim negative"),
        ([0] * 4, [5, 5], "cannot reshape"),
        ([0] * 4, [-3, 4], "negative size"),
    ],
)
def test_run_time_pads_or_shapes_that_do_not_fit_are_execution_errors_naming_the_node(
    backend, pads, shape, message
):
    g = mdsl.frontends.onnx.load(_pad_reshape_model())
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    feeds = {"x": np.ones((3, 4), np.float32), "pads": np.array(pads), "s": np.array(shape)}
    with pytest.raises(mdsl.ExecutionError, match=message) as e:
        run(**feeds)
    assert e.value.node in ("Pad_crop", "DynamicReshape")  # the ONNX nodes have no names


@pytest.mark.parametrize("backend", ["python", "c"])
def test_a_slice_with_run_time_axes_and_steps_matches_onnxruntime(backend):
    import onnxruntime as ort

    graph = oh.make_graph(
        [oh.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])],
        "slice_axes",
        [
            oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 5]),
            *(oh.make_tensor_value_info(n, onnx.TensorProto.INT64, [1]) for n in ("axes", "steps")),
        ],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [
            onnx.numpy_helper.from_array(np.array([4], np.int64), "starts"),
            onnx.numpy_helper.from_array(np.array([0], np.int64), "ends"),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    g = mdsl.frontends.onnx.load(model)
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    for axis, step in [(1, -1), (0, -2), (-1, -3)]:
        feeds = {"x": x, "axes": np.array([axis]), "steps": np.array([step])}
        (want,) = session.run(None, feeds)
        np.testing.assert_array_equal(run(**feeds)["y"], want)
    with pytest.raises(mdsl.ExecutionError, match="outside rank"):
        run(x=x, axes=np.array([2]), steps=np.array([1]))


def test_a_run_time_reshape_to_value_dims_is_bounded_by_them_not_by_numel():
    """AffineGrid 3-D reshapes (N, D*H*W, 3) to (N, D, H, W, 3) read from `size`: each
    dim's bound is its value dim, so the buffers hold numel elements (numel(x) per dim
    would make them numel**5: "out of memory" on C)."""
    from mdsl.ops.dynamic import dynamic_bounds

    (case,) = collect_cases(["test_affine_grid_3d"])
    g = import_model(case.model, label=case.name)
    (node,) = [n for n in g if n.op_type == "DynamicReshape"]
    bounds = list(dynamic_bounds(node).values())
    assert bounds[-1] == 3 and bounds[:-1] == list(node.attrs["sizes"])[:-1]
    assert all(isinstance(b, mdsl.Dim) and b.name for b in bounds[:-1])  # bare value dims


def _until_model(trip_count: int | None):
    """A Loop of trip count M (INT64_MAX, or a graph input) that only its condition
    ends (acc < limit), stacking acc per iteration: the rows are bounded by M only."""
    body = oh.make_graph(
        [
            oh.make_node("Add", ["y_in", "one"], ["y_out"]),
            oh.make_node("Less", ["y_out", "limit"], ["cond_out"]),
            oh.make_node("Identity", ["y_out"], ["scan_out"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("y_in", onnx.TensorProto.FLOAT, []),
        ],
        [
            oh.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("y_out", onnx.TensorProto.FLOAT, []),
            oh.make_tensor_value_info("scan_out", onnx.TensorProto.FLOAT, []),
        ],
        [onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one")],
    )
    inits = [
        onnx.numpy_helper.from_array(np.array(True), "go"),
        onnx.numpy_helper.from_array(np.array(0.0, np.float32), "y0"),
    ]
    inputs = [oh.make_tensor_value_info("limit", onnx.TensorProto.FLOAT, [])]
    if trip_count is None:
        inputs.append(oh.make_tensor_value_info("M", onnx.TensorProto.INT64, []))
    else:
        inits.append(onnx.numpy_helper.from_array(np.array(trip_count, np.int64), "M"))
    graph = oh.make_graph(
        [oh.make_node("Loop", ["M", "go", "y0"], ["y", "rows"], body=body)],
        "until",
        inputs,
        [
            oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, []),
            oh.make_tensor_value_info("rows", onnx.TensorProto.FLOAT, None),
        ],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["python", "c", "numba"])
@pytest.mark.parametrize("trip_count", [2**63 - 1, None])
def test_a_loop_of_int64_max_iterations_its_condition_ends_runs_on_every_backend(
    backend, trip_count
):
    """Compiled backends plan the rows at a capacity (4096 first), not at the trip
    count; 5000 rows outgrow it: the capacity doubles and the call runs again."""
    model = _until_model(trip_count)
    g = mdsl.frontends.onnx.load(model)
    run = (
        (lambda **f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    for limit in (5.0, 0.5, 5000.0, 3.0):
        feeds = {"limit": np.array(limit, np.float32)}
        if trip_count is None:
            feeds["M"] = np.array(2**63 - 1, np.int64)
        got, want = run(**feeds), _ort(model, feeds)
        assert got["rows"].shape == want["rows"].shape
        np.testing.assert_array_equal(got["rows"], want["rows"])
        np.testing.assert_array_equal(got["y"], want["y"])
