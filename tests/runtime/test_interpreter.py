"""The interpreter: captured tensors, and errors that say which node failed and why."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops

pytestmark = pytest.mark.usefixtures("sandbox")
THIS_FILE = "test_interpreter.py"


def test_capture_returns_every_tensor_by_name():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 4))
        with mdsl.scope("blk"):
            a, b = ops.split(x, axis=1, num_outputs=2)
            y = ops.exp(a) * b
        g.output(y, "y")
        g.output(a, "first_half")
    xv = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    got = mdsl.interpret(g, {"x": xv}, capture=True)
    split = g.node("blk/Split")
    assert [t.name for t in split.outputs] == ["blk/Split", "blk/Split:1"]
    assert set(got) == {"x", "blk/Split", "blk/Split:1", "blk/Exp", "blk/Mul", "y", "first_half"}
    np.testing.assert_array_equal(got["blk/Split"], xv[:, :2])
    np.testing.assert_array_equal(got["blk/Split:1"], xv[:, 2:])
    np.testing.assert_allclose(got["blk/Exp"], np.exp(xv[:, :2]), rtol=1e-6)
    np.testing.assert_array_equal(got["y"], got["blk/Mul"])
    plain = mdsl.interpret(g, {"x": xv})
    assert set(plain) == {"y", "first_half"}


def test_capture_keeps_tensor_names_when_an_output_reuses_one():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        g.output(x * 2.0, "x")  # an output named like the input tensor
    got = mdsl.interpret(g, {"x": np.ones(2, np.float32)}, capture=True)
    np.testing.assert_array_equal(got["x"], [1.0, 1.0])  # the tensor wins
    np.testing.assert_array_equal(mdsl.interpret(g, {"x": np.ones(2, np.float32)})["x"], [2, 2])


def _declare(op_type, impl, out_dtype="float32"):
    @mdsl.op_proto(
        op_type, inputs={"x": "float", "w": "float"}, outputs={"y": ["float32", "int32"]}
    )
    def infer(x, w):
        return mdsl.TensorType(x.shape, out_dtype)

    mdsl.register_op_impl(op_type, impl)
    return infer


@mdsl.layer
def block(x, op):
    w = mdsl.param("w", (3,))
    return op(x, w) + 1.0  # the op's node is "block/<OpType>", built on this line


def _build(op):
    with mdsl.Graph() as g:
        g.output(block(g.input("x", ("N", 3)), op), "y")
    return g


FEEDS = {"x": np.ones((2, 3), np.float32)}
BUILD_LINE = "return op(x, w) + 1.0"


def _source_line() -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if BUILD_LINE in line)


def test_a_raising_implementation_names_node_layer_source_and_input_shapes():
    def boom(x, w):
        raise ValueError("cannot handle this")

    g = _build(_declare("Boom", boom))
    with pytest.raises(mdsl.ExecutionError) as info:
        mdsl.interpret(g, FEEDS)
    err = info.value
    assert (err.node, err.op_type) == ("block/Boom", "Boom")
    assert err.source.endswith(f"{THIS_FILE}:{_source_line()}")
    assert "implementation raised ValueError: cannot handle this" in err.message
    assert "layer 'block'" in err.message and "python binding" in err.message
    assert "inputs: x=float32[2,3], w=float32[3]" in err.message
    assert str(err).startswith(f"block/Boom (Boom) at {err.source}: ")
    assert isinstance(err.__cause__, ValueError)


def test_an_mdsl_error_from_an_implementation_keeps_its_type_and_gains_context():
    def strict(x, w):
        raise mdsl.ShapeError("w must match x's last dim")

    g = _build(_declare("Strict", strict))
    with pytest.raises(mdsl.ShapeError, match="w must match") as info:
        mdsl.interpret(g, FEEDS)
    assert info.value.node == "block/Strict" and "x=float32[2,3]" in info.value.message


@pytest.mark.parametrize(
    ("impl", "match"),
    [
        (lambda x, w: x[:1], r"returned float32\[1, 3\], the graph declares float32\[2, 3\]"),
        (
            lambda x, w: x.astype(np.float64),
            r"returned float64\[2, 3\], the graph declares float32",
        ),
        (lambda x, w: (x, w), "returned 2 values for 1 outputs"),
        (lambda x, w: "text", r"returned <U4\[\]"),
    ],
)
def test_results_that_disagree_with_the_declared_type_are_caught_at_their_node(impl, match):
    g = _build(_declare("Wrong", impl))
    with pytest.raises(mdsl.ExecutionError, match=match) as info:
        mdsl.interpret(g, FEEDS)
    assert info.value.node == "block/Wrong"


def test_an_expression_failing_at_run_time_names_the_node_and_the_expression():
    @mdsl.op_proto("IntPow", inputs={"a": "int", "b": "int"}, outputs={"y": "int"},
                   category="pointwise")  # fmt: skip
    def int_pow(a, b):
        return a

    mdsl.register_op_impl("IntPow", lambda a, b: a**b, backend="expr")
    with mdsl.Graph() as g:
        with mdsl.scope("s"):
            y = int_pow(g.input("a", (2,), "int32"), g.input("b", (2,), "int32"))
        g.output(y, "y")
    feeds = {"a": np.array([2, 3], np.int32), "b": np.array([1, 2], np.int32)}
    np.testing.assert_array_equal(mdsl.interpret(g, feeds)["y"], [2, 9])
    feeds["b"] = np.array([1, -1], np.int32)  # numpy refuses negative integer powers
    with pytest.raises(mdsl.ExecutionError) as info:
        mdsl.interpret(g, feeds)
    err = info.value
    assert err.node == "s/IntPow" and "evaluating a ** b failed: ValueError" in err.message
    assert "expr binding; inputs: a=int32[2], b=int32[2]" in err.message


def test_feeds_are_checked_before_any_node_runs():
    calls = []
    g = _build(_declare("Counted", lambda x, w: calls.append(1) or x))
    with pytest.raises(mdsl.ExecutionError, match="missing x"):
        mdsl.interpret(g, {})
    assert calls == []


def test_symbolic_graphs_run_at_any_bound_size():
    with mdsl.Graph() as g:
        x = g.input("x", ("B", "T", 4))
        g.output(ops.relu(x).sum(axis=-1), "s")
    for b, t in ((1, 1), (3, 5)):
        xv = np.random.default_rng(b).normal(size=(b, t, 4)).astype(np.float32)
        got = mdsl.interpret(g, {"x": xv})["s"]
        np.testing.assert_allclose(got, np.maximum(xv, 0).sum(-1), rtol=1e-6)


def test_an_output_dim_no_feed_binds_is_reported_at_its_node():
    @mdsl.op_proto("NonZeroLike", inputs={"x": "float"}, outputs={"y": "int64"})
    def non_zero_like(x):
        return mdsl.TensorType(("K",), "int64")  # a data-dependent size

    mdsl.register_op_impl("NonZeroLike", lambda x: np.flatnonzero(x))
    with mdsl.Graph() as g:
        g.output(non_zero_like(g.input("x", (4,))), "idx")
    with pytest.raises(mdsl.ExecutionError, match="symbolic dim K has no value bound") as info:
        mdsl.interpret(g, {"x": np.ones(4, np.float32)})
    assert info.value.node == "NonZeroLike" and "x=float32[4]" in info.value.message
