"""Every build-time mistake raises an MdslError subclass whose one-line message names the
node path, the op type, the offending values and the user's own file:line."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.user_lines import assert_error_at, assert_points_at


def test_shape_mismatch_names_node_values_and_line():
    with mdsl.Graph() as g:
        a = g.input("a", ("N", 64))
        b = g.input("b", (32, 8))
        with mdsl.scope("Block3"), mdsl.scope("Attention"), pytest.raises(mdsl.ShapeError) as e:
            ops.matmul(a, b, name="MatMul_QK")  # <- matmul-mismatch
        g.output(a, "y")
    assert_error_at(
        e.value, __file__, "matmul-mismatch", node="Block3/Attention/MatMul_QK", op_type="MatMul"
    )
    assert e.value.message == "K of a (64) != K of b (32)"


def test_shape_mismatch_through_an_operator_inside_a_layer():
    @mdsl.layer
    def residual(x, y):
        return x + y  # <- add-mismatch

    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mdsl.ShapeError) as e:
            residual(x, g.input("y", (4, 3)))
        g.output(x, "y")
    assert_error_at(e.value, __file__, "add-mismatch", node="residual/Add", op_type="Add")
    assert "(2, 3)" in e.value.message and "(4, 3)" in e.value.message
    assert "2 vs 4" in e.value.message


def test_failed_node_is_not_recorded_and_its_name_stays_free():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mdsl.ShapeError):
            ops.matmul(x, x)
        y = ops.matmul(x, ops.transpose(x))
        g.output(y, "y")
    assert y.name == "MatMul"
    assert [n.op_type for n in g.nodes] == ["Input", "Transpose", "MatMul", "Output"]


def test_dtype_outside_the_allowed_list():
    with mdsl.Graph() as g:
        x = g.input("x", (2,), "int32")
        with mdsl.scope("Head"), pytest.raises(mdsl.DTypeError) as e:
            ops.exp(x)  # <- exp-int
        g.output(x, "y")
    assert_error_at(e.value, __file__, "exp-int", node="Head/Exp", op_type="Exp")
    assert e.value.message == (
        "input 'x' is int32, expected one of bfloat16, float16, float32, float64"
    )


def test_mixed_dtypes_of_a_binary_op():
    with mdsl.Graph() as g:
        x = g.input("x", (2,), "float32")
        y = g.input("y", (2,), "float16")
        with pytest.raises(mdsl.DTypeError) as e:
            x * y  # <- mul-dtypes
        g.output(x, "y")
    assert_error_at(e.value, __file__, "mul-dtypes", node="Mul", op_type="Mul")
    assert "float32 and float16" in e.value.message


def test_missing_attr():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mdsl.GraphError) as e:
            ops.reshape(x)  # <- reshape-missing
        g.output(x, "y")
    assert_error_at(e.value, __file__, "reshape-missing", node="Reshape", op_type="Reshape")
    assert e.value.message == "missing required attr 'shape'"


def test_unknown_attr():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mdsl.GraphError) as e:
            ops.reshape(x, shape=(6,), axis=1, name="flat")  # <- reshape-unknown
        g.output(x, "y")
    assert_error_at(e.value, __file__, "reshape-unknown", node="flat", op_type="Reshape")
    assert e.value.message == "unknown attr axis (known: shape, allowzero)"


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"shape": "ab"}, "attr 'shape' expects list[int], got 'ab'"),
        ({"shape": (6.0,)}, "attr 'shape' expects list[int], got (6.0,)"),
        ({"shape": (True, 6)}, "attr 'shape' expects list[int], got (True, 6)"),
        ({"shape": 6}, "attr 'shape' expects list[int], got 6"),
        ({"shape": (6,), "allowzero": 1}, "attr 'allowzero' expects bool, got 1"),
    ],
)
def test_mistyped_attr(attrs, message):
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mdsl.GraphError) as e:
            ops.reshape(x, **attrs)  # <- reshape-mistyped
        g.output(x, "y")
    assert_error_at(e.value, __file__, "reshape-mistyped", node="Reshape", op_type="Reshape")
    assert e.value.message == message


def test_op_used_outside_a_graph():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        g.output(x, "y")
    with pytest.raises(mdsl.GraphError) as e:
        ops.relu(x)  # <- relu-outside
    assert_error_at(e.value, __file__, "relu-outside", node=None, op_type=None)
    assert "op Relu used outside a graph" in e.value.message
    with pytest.raises(mdsl.GraphError) as e:
        x + 1.0  # <- add-outside
    assert_error_at(e.value, __file__, "add-outside", node=None, op_type=None)
    with pytest.raises(mdsl.GraphError) as e:
        mdsl.param("w", (2,))  # <- param-outside
    assert_error_at(e.value, __file__, "param-outside", node=None, op_type=None)
    assert "param 'w' used outside a graph" in e.value.message


def test_graph_methods_outside_their_block():
    with mdsl.Graph("done") as g:
        x = g.input("x", (2,))
        g.output(x, "y")
    with pytest.raises(mdsl.GraphError) as e:
        g.const("c", 1.0)  # <- const-outside
    assert_error_at(e.value, __file__, "const-outside", node=None, op_type=None)
    assert "g.const() called outside `with` block of graph 'done'" in e.value.message
    with pytest.raises(mdsl.GraphError, match=r"g\.input\(\) called outside"):
        g.input("z", (2,))


def test_scope_outside_a_graph_points_at_the_with_line():
    with pytest.raises(mdsl.GraphError) as e, mdsl.scope("Head"):  # <- scope-outside
        pass
    assert_error_at(e.value, __file__, "scope-outside", node=None, op_type=None)
    assert "layer 'Head' used outside a graph" in e.value.message


def test_graph_without_outputs():
    with pytest.raises(mdsl.GraphError) as e, mdsl.Graph("empty") as g:  # <- no-outputs
        g.input("x", (2,))
    assert_error_at(e.value, __file__, "no-outputs", node=None, op_type=None)
    assert "graph 'empty' has no outputs" in e.value.message


def test_an_exception_inside_the_block_is_not_masked_by_missing_outputs():
    with pytest.raises(ZeroDivisionError), mdsl.Graph():
        1 / 0


def test_tensor_from_another_graph():
    with mdsl.Graph("first") as g1:
        x = g1.input("x", (2,))
        g1.output(x, "y")
    with mdsl.Graph("second") as g2:
        y = g2.input("y", (2,))
        with mdsl.scope("Mix"), pytest.raises(mdsl.GraphError) as e:
            ops.add(y, x)  # <- foreign-tensor
        with pytest.raises(mdsl.GraphError) as e2:
            g2.output(x, "x")  # <- foreign-output
        g2.output(y, "y")
    assert_error_at(e.value, __file__, "foreign-tensor", node="Mix/Add", op_type="Add")
    assert e.value.message == "input 'b': tensor x belongs to graph 'first', not 'second'"
    assert_error_at(e2.value, __file__, "foreign-output", node=None, op_type=None)


def test_tensor_from_an_outer_graph_inside_a_nested_graph_block():
    with mdsl.Graph("outer") as outer:
        x = outer.input("x", (2,))
        with mdsl.Graph("inner") as inner:
            with pytest.raises(mdsl.GraphError, match="belongs to graph 'outer', not 'inner'"):
                ops.relu(x)
            inner.output(ops.relu(inner.input("z", (2,))), "z")
        outer.output(ops.relu(x), "y")  # the outer graph is current again
    assert outer.node("Relu").graph is outer
    assert inner.node("Relu").graph is inner


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((2, -3), "negative dim -3"),
        ((2, 2**41), "absurd dim 2199023255552"),
        ((2, 1.5), "a dim must be an int, a name or a Dim, got 1.5"),
        ((True, 2), "a dim must be an int, a name or a Dim, got True"),
        ((2, "3x"), "a symbolic dim name must be an identifier, got '3x'"),
        (5.0, "a shape must be a sequence of dims"),
    ],
)
def test_bad_input_dims(shape, message):
    with mdsl.Graph() as g:
        with pytest.raises(mdsl.ShapeError) as e:
            g.input("x", shape)  # <- bad-dims
        g.output(g.input("ok", (1,)), "y")
    assert_error_at(e.value, __file__, "bad-dims", node="x", op_type="Input")
    assert message in e.value.message


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"dtype": "float8"}, mdsl.DTypeError, "unknown dtype 'float8'"),
        ({"dtype": object}, mdsl.DTypeError, "numpy dtype object has no mdsl equivalent"),
        ({"format": "NCHW"}, mdsl.ShapeError, "format NCHW needs rank 4, got shape (2, 3)"),
        ({"format": "XYZ"}, mdsl.ShapeError, "unknown format 'XYZ'"),
    ],
)
def test_bad_input_dtype_or_format(kwargs, error, message):
    with mdsl.Graph() as g:
        with pytest.raises(error) as e:
            g.input("x", (2, 3), **kwargs)  # <- bad-input-type
        g.output(g.input("ok", (1,)), "y")
    assert_error_at(e.value, __file__, "bad-input-type", node="x", op_type="Input")
    assert message in e.value.message


def test_absurd_and_negative_dims_produced_by_ops():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mdsl.ShapeError) as e:
            ops.reshape(x, shape=(-2, 3))  # <- reshape-negative
        assert_error_at(e.value, __file__, "reshape-negative", node="Reshape", op_type="Reshape")
        assert e.value.message == "reshape target has negative dim -2"
        with pytest.raises(mdsl.ShapeError) as e:
            ops.reshape(x, shape=(2**50, 3))
        assert "(2, 3) (6 elements)" in e.value.message and str(2**50) in e.value.message
        g.output(x, "y")


@pytest.mark.parametrize(
    ("shape", "kwargs", "error", "message"),
    [
        (("N", 3), {}, mdsl.GraphError, "shape ('N', 3) must be static"),
        ((2, -1), {}, mdsl.ShapeError, "negative dim -1"),
        ((2,), {"init": "gauss"}, mdsl.GraphError, "init must be"),
        ((2,), {"dtype": "float9"}, mdsl.DTypeError, "unknown dtype"),
        ((3,), {"init": np.ones(2)}, mdsl.GraphError, "init array shape (2,) != shape (3,)"),
    ],
)
def test_bad_params(shape, kwargs, error, message):
    with mdsl.Graph() as g:
        with mdsl.scope("Head"), pytest.raises(error) as e:
            mdsl.param("w", shape, **kwargs)  # <- bad-param
        g.output(g.input("x", (1,)), "y")
    assert_error_at(e.value, __file__, "bad-param", node="Head/w", op_type="Const")
    assert message in e.value.message


@pytest.mark.parametrize(
    ("method", "args", "message"),
    [
        ("output", ("x", "y"), "output 'y' is set twice"),
        ("output", ("x", ""), "output name must be a non-empty string"),
        ("output", (3.0, "z"), "output 'z' must be a Tensor, got float"),
        ("input", ("x", (2,)), "input name 'x' is empty, not a string, or declared twice"),
        ("input", ("", (2,)), "input name '' is empty"),
    ],
)
def test_bad_graph_boundary_calls(method, args, message):
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        g.output(x, "y")
        args = tuple(x if a == "x" and method == "output" else a for a in args)
        with pytest.raises(mdsl.GraphError) as e:
            getattr(g, method)(*args)  # <- bad-boundary
    assert_points_at(e.value.source, __file__, "bad-boundary")
    assert message in e.value.message


def test_truth_value_of_a_tensor():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.GraphError) as e:
            if x > 0.0:  # <- tensor-bool
                pass
        g.output(x, "y")
    assert_points_at(e.value.source, __file__, "tensor-bool")
    assert "truth value of tensor Greater" in e.value.message


def test_wrong_input_arguments_of_a_builder():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.GraphError) as e:
            ops.add(x, "one")  # <- add-string
        assert_error_at(e.value, __file__, "add-string", node="Add", op_type="Add")
        assert e.value.message == "input 'b' must be a Tensor, got str"
        with pytest.raises(mdsl.GraphError, match="missing required input 'b'"):
            ops.add(x)
        with pytest.raises(mdsl.GraphError, match=r"takes 2 inputs \(a, b\), got 3 positional"):
            ops.add(x, x, x)
        with pytest.raises(mdsl.DTypeError, match=r"scalar 0\.5 cannot become a int32 constant"):
            g.input("i", (2,), "int32") + 0.5
        g.output(x, "y")


def test_unsupported_index():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mdsl.GraphError, match="index 'a' is not supported"):
            x["a"]
        with pytest.raises(mdsl.GraphError, match="too many indices"):
            x[0, 0, 0]
        with pytest.raises(mdsl.GraphError, match="only one Ellipsis"):
            x[..., ...]
        g.output(x, "y")


def test_node_names_must_not_look_like_output_references():
    # "Split:1" names output 1 of node Split: a node of that name would be ambiguous
    with mdsl.Graph() as g:
        x = g.input("x", (6,))
        with mdsl.scope("S"), pytest.raises(mdsl.GraphError) as e:
            ops.exp(x, name="Split:1")  # <- colon-name
        with pytest.raises(mdsl.GraphError, match="must not contain ':'"):
            g.input("a:0", (2,))
        with pytest.raises(mdsl.GraphError, match="must not contain ':'"):
            mdsl.param("w:1", (2,))
        g.output(x, "y")
    assert_error_at(e.value, __file__, "colon-name", node="S/Split:1", op_type="Exp")
    assert [n.name for n in g.nodes] == ["x", "Output_y"]
