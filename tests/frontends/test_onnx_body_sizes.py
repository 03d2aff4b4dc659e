"""Run-time sizes inside If/Loop bodies (docs/dynamic-shapes.md, "Sizes inside bodies"):
sizes a body computes each time it runs (a value dim of the iteration counter, a
data-dependent count, a slice up to the iteration) and an If whose branches give
different shapes, checked against ONNX Runtime on every backend, and the bad values
that must be ExecutionErrors naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import mdsl
from mdsl.ir.errors import ExecutionError, GraphError

BACKENDS = ["python", "c", "numba"]
F, I64, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL


def _info(name, elem, shape):
    return oh.make_tensor_value_info(name, elem, shape)


def _i64(name, value):
    return onnx.numpy_helper.from_array(np.array(value, np.int64), name)


def _f32(name, value):
    return onnx.numpy_helper.from_array(np.array(value, np.float32), name)


def _model(nodes, inputs, outputs, inits=()):
    graph = oh.make_graph(nodes, "sizes", inputs, outputs, list(inits))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _loop(body_nodes, body_inits, outputs, extra_outputs=(), graph_inputs=(), nodes_before=()):
    """A Loop over i < M carrying a float acc; the body's nodes compute acc_out (and any
    scan outputs `extra_outputs`, as (name, elem type))."""
    body = oh.make_graph(
        [oh.make_node("Identity", ["c"], ["c_out"]), *body_nodes],
        "body",
        [_info("i", I64, []), _info("c", BOOL, []), _info("acc", F, [])],
        [_info("c_out", BOOL, []), _info("acc_out", F, [])]
        + [_info(n, t, None) for n, t in extra_outputs],
        list(body_inits),
    )
    scans = [f"{n}_rows" for n, _ in extra_outputs]
    rows = [(f"{n}_rows", t) for n, t in extra_outputs]
    loop = oh.make_node("Loop", ["M", "", "acc0"], ["acc_final", *scans], body=body)
    return _model(
        [*nodes_before, loop],
        [_info("M", I64, []), *graph_inputs],
        [_info(n, dict(rows).get(n, F), None) for n in outputs],
        [_f32("acc0", 0.0)],
    )


def _prefix_sums():
    """acc += sum(x[:i]); the sums stacked: a slice whose length is the iteration."""
    return _loop(
        [
            oh.make_node("Unsqueeze", ["i", "axes0"], ["end"]),
            oh.make_node("Slice", ["x", "start0", "end", "axes0"], ["part"]),
            oh.make_node("ReduceSum", ["part"], ["s"], keepdims=0),
            oh.make_node("Add", ["acc", "s"], ["acc_out"]),
            oh.make_node("Identity", ["s"], ["s_scan"]),
        ],
        [_i64("axes0", [0]), _i64("start0", [0])],
        ["acc_final", "s_scan_rows"],
        extra_outputs=[("s_scan", F)],
        graph_inputs=[_info("x", F, ["N"])],
    )


def _shape_gather_reshape():
    """t = x[:i + 1]; n = Shape(t)[0]; acc += sum(Reshape(t, [1, n]) @ its transpose)."""
    return _loop(
        [
            oh.make_node("Add", ["i", "one"], ["i1"]),
            oh.make_node("Unsqueeze", ["i1", "axes0"], ["end"]),
            oh.make_node("Slice", ["x", "start0", "end", "axes0"], ["t"]),
            oh.make_node("Shape", ["t"], ["shape"]),
            oh.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
            oh.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
            oh.make_node("Concat", ["one1", "n1"], ["row_shape"], axis=0),
            oh.make_node("Reshape", ["t", "row_shape"], ["row"]),
            oh.make_node("Transpose", ["row"], ["column"], perm=[1, 0]),
            oh.make_node("MatMul", ["column", "row"], ["outer"]),
            oh.make_node("ReduceSum", ["outer"], ["s"], keepdims=0),
            oh.make_node("Add", ["acc", "s"], ["acc_out"]),
        ],
        [
            _i64("axes0", [0]),
            _i64("start0", [0]),
            _i64("one", 1),
            _i64("zero", 0),
            _i64("one1", [1]),
        ],
        ["acc_final"],
        graph_inputs=[_info("x", F, ["N"])],
    )


def _nonzero_counts():
    """acc += sum of the x > i; the number of them stacked per iteration."""
    return _loop(
        [
            oh.make_node("Cast", ["i"], ["fi"], to=F),
            oh.make_node("Greater", ["x", "fi"], ["mask"]),
            oh.make_node("NonZero", ["mask"], ["where"]),
            oh.make_node("Squeeze", ["where", "axes0"], ["picked_at"]),
            oh.make_node("Gather", ["x", "picked_at"], ["picked"], axis=0),
            oh.make_node("ReduceSum", ["picked"], ["s"], keepdims=0),
            oh.make_node("Add", ["acc", "s"], ["acc_out"]),
            oh.make_node("Shape", ["picked_at"], ["count"]),
        ],
        [_i64("axes0", [0])],
        ["acc_final", "count_rows"],
        extra_outputs=[("count", I64)],
        graph_inputs=[_info("x", F, ["N"])],
    )


def _value_dims_in_body():
    """Sizes computed from the iteration counter i (value dims bound per iteration):
    ConstantOfShape([i - k]), Range(0, i), Tile(x, [i + 1]), Expand(2, [i + 1]),
    Pad(x, [i, 1]) and TopK(x, min(i + 1, N)), each summed into acc."""
    nodes = [
        oh.make_node("Sub", ["i", "k"], ["i_k"]),
        oh.make_node("Unsqueeze", ["i_k", "axes0"], ["ones_shape"]),
        oh.make_node("ConstantOfShape", ["ones_shape"], ["ones"], value=_f32("v", [1.0])),
        oh.make_node("Range", ["zero", "i", "one"], ["ramp"]),
        oh.make_node("Cast", ["ramp"], ["ramp_f"], to=F),
        oh.make_node("Add", ["i", "one"], ["i1"]),
        oh.make_node("Unsqueeze", ["i1", "axes0"], ["i1v"]),
        oh.make_node("Tile", ["x", "i1v"], ["tiled"]),
        oh.make_node("Expand", ["two", "i1v"], ["twos"]),
        oh.make_node("Unsqueeze", ["i", "axes0"], ["iv"]),
        oh.make_node("Concat", ["iv", "one1"], ["pads"], axis=0),
        oh.make_node("Pad", ["x", "pads", "half"], ["padded"]),
        oh.make_node("Shape", ["x"], ["x_shape"]),
        oh.make_node("Min", ["i1v", "x_shape"], ["kv"]),
        oh.make_node("TopK", ["x", "kv"], ["top", "top_at"]),
    ]
    summed = ["ones", "ramp_f", "tiled", "twos", "padded", "top"]
    nodes += [oh.make_node("ReduceSum", [t], [f"{t}_sum"], keepdims=0) for t in summed]
    nodes.append(oh.make_node("Sum", ["acc", *[f"{t}_sum" for t in summed]], ["acc_out"]))
    inits = [_i64("axes0", [0]), _i64("zero", 0), _i64("one", 1), _i64("one1", [1])]
    inits += [_f32("two", 2.0), _f32("half", 0.5)]
    return _loop(
        nodes,
        inits,
        ["acc_final"],
        graph_inputs=[_info("x", F, ["N"]), _info("k", I64, [])],
    )


def _nested_trip_counts():
    """An inner Loop running i + 1 times (a trip count the outer body computes) that
    stacks j * x as scan rows; the outer acc adds their sum."""
    inner = oh.make_graph(
        [
            oh.make_node("Identity", ["ic"], ["ic_out"]),
            oh.make_node("Cast", ["j"], ["jf"], to=F),
            oh.make_node("Mul", ["x", "jf"], ["row"]),
        ],
        "inner",
        [_info("j", I64, []), _info("ic", BOOL, [])],
        [_info("ic_out", BOOL, []), _info("row", F, None)],
    )
    return _loop(
        [
            oh.make_node("Add", ["i", "one"], ["trips"]),
            oh.make_node(
                "Loop",
                [
                    "trips",
                    "",
                ],
                ["rows"],
                body=inner,
            ),
            oh.make_node("ReduceSum", ["rows"], ["s"], keepdims=0),
            oh.make_node("Add", ["acc", "s"], ["acc_out"]),
        ],
        [_i64("one", 1)],
        ["acc_final"],
        graph_inputs=[_info("x", F, [3])],
    )


def _if_shapes():
    """y = If(c, then: x[0:3] of shape [3, n], else: Concat(x, x[0:2]) of shape [5, n])."""
    then = oh.make_graph(
        [oh.make_node("Slice", ["x", "s0", "e3", "axes0"], ["a"])],
        "then",
        [],
        [_info("a", F, None)],
        [_i64("s0", [0]), _i64("e3", [3]), _i64("axes0", [0])],
    )
    other = oh.make_graph(
        [oh.make_node("Concat", ["x", "head"], ["b"], axis=0)], "else", [], [_info("b", F, None)]
    )
    return _model(
        [
            oh.make_node("Slice", ["x", "s0", "e2", "axes0"], ["head"]),
            oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
            oh.make_node("Mul", ["y", "y"], ["z"]),
        ],
        [_info("c", BOOL, []), _info("x", F, [3, "n"])],
        [_info("z", F, None)],
        [_i64("s0", [0]), _i64("e2", [2]), _i64("axes0", [0])],
    )


def _runner(model, backend):
    g = mdsl.frontends.onnx.load(model)
    if backend == "python":
        return lambda **feeds: mdsl.interpret(g, feeds)
    return mdsl.compile(g, backend=backend)


def _check_against_ort(model, backend, feed_sets):
    import onnxruntime as ort

    run = _runner(model, backend)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    for feeds in feed_sets:
        want = dict(zip(names, session.run(None, feeds)))
        got = run(**feeds)
        for name in names:
            assert got[name].shape == want[name].shape, (name, feeds)
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=f"{name} {feeds}")


X5 = np.array([3.0, -1.0, 2.0, 5.0, 0.5], np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_body_slicing_up_to_the_iteration_matches_onnxruntime(backend):
    feeds = [{"x": X5, "M": np.array(m, np.int64)} for m in (4, 0, 1, 6)]
    _check_against_ort(_prefix_sums(), backend, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_body_reshaping_by_its_own_shape_matches_onnxruntime(backend):
    feeds = [{"x": X5[:n], "M": np.array(m, np.int64)} for n, m in ((5, 4), (3, 5), (1, 0))]
    _check_against_ort(_shape_gather_reshape(), backend, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_body_with_nonzero_matches_onnxruntime(backend):
    feeds = [{"x": X5, "M": np.array(m, np.int64)} for m in (6, 2, 0)]
    _check_against_ort(_nonzero_counts(), backend, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sizes_a_loop_body_computes_from_its_counter_match_onnxruntime(backend):
    """80 iterations: sizes above the first capacity compiled backends plan them at."""
    feeds = [
        {"x": X5[:n], "M": np.array(m, np.int64), "k": np.array(k, np.int64)}
        for n, m, k in ((5, 4, 0), (2, 6, -1), (3, 0, 0), (1, 1, 0), (5, 80, 0))
    ]
    _check_against_ort(_value_dims_in_body(), backend, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_in_a_body_with_a_trip_count_the_body_computes_matches_onnxruntime(backend):
    x = np.array([1.0, 2.0, -4.0], np.float32)
    _check_against_ort(
        _nested_trip_counts(), backend, [{"x": x, "M": np.array(m, np.int64)} for m in (3, 0, 1)]
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_branches_of_shapes_3_by_n_and_5_by_n_match_onnxruntime(backend):
    model = _if_shapes()
    g = mdsl.frontends.onnx.load(model)
    assert isinstance(g.outputs["z"].shape[0], mdsl.Dim)  # the If's own size, bound when it runs
    feeds = [
        {"c": np.array(c), "x": np.arange(3 * n, dtype=np.float32).reshape(3, n)}
        for c, n in ((True, 4), (False, 4), (False, 1), (True, 2))
    ]
    _check_against_ort(model, backend, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("k", "message"),
    [(3, "negative or too large"), (-(2**62), "negative or too large")],
)
def test_a_bad_size_computed_in_a_body_is_an_execution_error_naming_the_node(backend, k, message):
    run = _runner(_value_dims_in_body(), backend)
    feeds = {"x": X5, "M": np.array(4, np.int64), "k": np.array(k, np.int64)}
    with pytest.raises(ExecutionError, match=message) as e:
        run(**feeds)
    assert e.value.node.endswith("ConstantOfShape_shape")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_time_shape_that_does_not_fit_in_a_body_is_an_execution_error(backend):
    body = [
        oh.make_node("Reshape", ["x", "shape"], ["r"]),
        oh.make_node("ReduceSum", ["r"], ["s"], keepdims=0),
        oh.make_node("Add", ["acc", "s"], ["acc_out"]),
    ]
    model = _loop(
        body, [], ["acc_final"], graph_inputs=[_info("x", F, [6]), _info("shape", I64, [2])]
    )
    run = _runner(model, backend)
    x = np.arange(6, dtype=np.float32)
    assert run(x=x, M=np.array(2, np.int64), shape=np.array([3, -1]))["acc_final"] == 30.0
    with pytest.raises(ExecutionError, match="cannot reshape") as e:
        run(x=x, M=np.array(2, np.int64), shape=np.array([4, -1]))
    assert "Reshape" in e.value.node


def test_scan_rows_of_a_size_the_body_computes_are_refused_at_import():
    body = [
        oh.make_node("Unsqueeze", ["i", "axes0"], ["end"]),
        oh.make_node("Slice", ["x", "start0", "end", "axes0"], ["part"]),
        oh.make_node("Identity", ["acc"], ["acc_out"]),
    ]
    model = _loop(
        body,
        [_i64("axes0", [0]), _i64("start0", [0])],
        ["acc_final"],
        extra_outputs=[("part", F)],
        graph_inputs=[_info("x", F, ["N"])],
    )
    with pytest.raises(GraphError, match="scan output 0: dim 0 of its rows"):
        mdsl.frontends.onnx.load(model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_if_output_sized_by_a_value_inside_a_branch_matches_onnxruntime(backend):
    """then: ConstantOfShape([n]) (a value dim of the branch), else: x: compiled
    backends plan the output at a capacity for n, grown (and the call run again) when
    n exceeds it (n = 100: above the first capacity, 64)."""
    then = oh.make_graph(
        [
            oh.make_node("Unsqueeze", ["n", "axes0"], ["shape"]),
            oh.make_node("ConstantOfShape", ["shape"], ["a"], value=_f32("v", [1.0])),
        ],
        "then",
        [],
        [_info("a", F, None)],
        [_i64("axes0", [0])],
    )
    other = oh.make_graph(
        [oh.make_node("Identity", ["x"], ["b"])], "else", [], [_info("b", F, None)]
    )
    model = _model(
        [oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [_info("c", BOOL, []), _info("x", F, [4]), _info("n", I64, [])],
        [_info("y", F, None)],
    )
    feeds = [
        {"c": np.array(c), "x": X5[:4], "n": np.array(n, np.int64)}
        for c, n in ((True, 3), (False, 3), (True, 100), (True, 0), (True, 70))
    ]
    _check_against_ort(model, backend, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_body_reads_sizes_the_top_level_bound_and_its_own(backend):
    """Tile(x, reps) binds reps' values at the top level (before the run, on compiled
    backends); the body reads those same sizes (Expand(i, reps)) next to one of
    its own (ConstantOfShape([i])), so the loop, run as a callback, gets the run's."""
    body = [
        oh.make_node("Cast", ["i"], ["fi"], to=F),
        oh.make_node("Expand", ["fi", "reps"], ["fixed"]),  # in the loop: it reads i
        oh.make_node("Unsqueeze", ["i", "axes0"], ["iv"]),
        oh.make_node("ConstantOfShape", ["iv"], ["growing"], value=_f32("w", [1.0])),
        oh.make_node("ReduceSum", ["fixed"], ["a"], keepdims=0),
        oh.make_node("ReduceSum", ["growing"], ["b"], keepdims=0),
        oh.make_node("Sum", ["acc", "a", "b"], ["acc_out"]),
    ]
    model = _loop(
        body,
        [_i64("axes0", [0])],
        ["acc_final", "tiled"],
        graph_inputs=[_info("x", F, [2]), _info("reps", I64, [1])],
        nodes_before=[oh.make_node("Tile", ["x", "reps"], ["tiled"])],
    )
    feeds = [
        {"x": X5[:2], "reps": np.array([r], np.int64), "M": np.array(m, np.int64)}
        for r, m in ((3, 4), (0, 2), (5, 0))
    ]
    _check_against_ort(model, backend, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_if_with_sizes_inside_its_branches_and_outputs_of_two_shapes(backend):
    """then: x[0:3] + sum(ConstantOfShape([n])), else: Concat(x, x[0:2]): the branch
    computes a size of its own (the If runs as a callback on compiled backends) and the
    output's first dim is 3 or 5."""
    then = oh.make_graph(
        [
            oh.make_node("Unsqueeze", ["n", "axes0"], ["shape"]),
            oh.make_node("ConstantOfShape", ["shape"], ["ones"], value=_f32("v", [1.0])),
            oh.make_node("ReduceSum", ["ones"], ["count"], keepdims=0),
            oh.make_node("Slice", ["x", "s0", "e3", "axes0"], ["top"]),
            oh.make_node("Add", ["top", "count"], ["a"]),
        ],
        "then",
        [],
        [_info("a", F, None)],
        [_i64("s0", [0]), _i64("e3", [3]), _i64("axes0", [0])],
    )
    other = oh.make_graph(
        [oh.make_node("Concat", ["x", "head"], ["b"], axis=0)], "else", [], [_info("b", F, None)]
    )
    model = _model(
        [
            oh.make_node("Slice", ["x", "s0", "e2", "axes0"], ["head"]),
            oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        [_info("c", BOOL, []), _info("x", F, [3, "m"]), _info("n", I64, [])],
        [_info("y", F, None)],
        [_i64("s0", [0]), _i64("e2", [2]), _i64("axes0", [0])],
    )
    feeds = [
        {"c": np.array(c), "x": np.ones((3, 2), np.float32), "n": np.array(n, np.int64)}
        for c, n in ((True, 4), (False, 4), (True, 0))
    ]
    _check_against_ort(model, backend, feeds)
