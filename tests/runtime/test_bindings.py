"""Binding implementations (`mdsl.register_op_impl`) and the interpreter's choice among them."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import expr as E
from mdsl.ops import bindings
from mdsl.runtime.kernels import choose_binding

pytestmark = pytest.mark.usefixtures("sandbox")


def _declare_scaled_shift():
    @mdsl.op_proto(
        "ScaledShift",
        inputs={"x": "float", "shift": "float"},
        outputs={"y": "float"},
        attrs={"scale": mdsl.Attr(float, default=2.0)},
        category="pointwise",
    )
    def scaled_shift(x, shift, *, scale):
        return mdsl.TensorType(x.shape, x.dtype)

    return scaled_shift


def _graph(builder, **attrs):
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3))
        s = g.input("s", (3,))
        g.output(builder(x, s, **attrs), "y")
    return g


X = np.arange(6, dtype=np.float32).reshape(2, 3)
S = np.array([1.0, 2.0, 3.0], np.float32)
FEEDS = {"x": X, "s": S}


def test_the_latest_of_python_and_expr_wins_under_auto():
    op = _declare_scaled_shift()
    g = _graph(op)
    before = g.to_json()
    mdsl.register_op_impl("ScaledShift", lambda x, shift, *, scale: (x - shift) * scale)
    np.testing.assert_array_equal(mdsl.interpret(g, FEEDS)["y"], (X - S) * 2)
    assert choose_binding("ScaledShift").backend == "python"

    mdsl.register_op_impl(
        "ScaledShift", lambda x, shift, *, scale: (x + shift) * scale, backend="expr"
    )
    assert choose_binding("ScaledShift").backend == "expr"
    np.testing.assert_array_equal(mdsl.interpret(g, FEEDS)["y"], (X + S) * 2)

    @mdsl.register_op_impl("ScaledShift")  # the decorator form, rebinding python again
    def again(x, shift, *, scale):
        return x * scale

    np.testing.assert_array_equal(mdsl.interpret(g, FEEDS)["y"], X * 2)
    assert g.to_json() == before  # rebinding never touches the graph


def test_explicit_impl_prefers_its_kind_and_falls_back_to_the_other():
    op = _declare_scaled_shift()
    g = _graph(op, scale=3.0)
    mdsl.register_op_impl("ScaledShift", lambda x, shift, *, scale: x * 0, backend="expr")
    assert choose_binding("ScaledShift", "python").backend == "expr"  # the only one
    np.testing.assert_array_equal(mdsl.interpret(g, FEEDS, impl="python")["y"], X * 0)
    mdsl.register_op_impl("ScaledShift", lambda x, shift, *, scale: x * scale)
    mdsl.register_op_impl("ScaledShift", lambda x, shift, *, scale: x - shift, backend="expr")
    np.testing.assert_array_equal(mdsl.interpret(g, FEEDS, impl="python")["y"], X * 3)
    np.testing.assert_array_equal(mdsl.interpret(g, FEEDS, impl="expr")["y"], X - S)
    assert choose_binding("MatMul", "expr").backend == "python"  # no expression form


def test_built_in_lowerings_never_win_by_recency_but_a_user_rebinding_does():
    relu = bindings.get_binding("Relu", "expr")
    assert relu.builtin and relu.serial < bindings.get_binding("Relu", "python").serial
    assert choose_binding("Relu").backend == "python"
    with mdsl.Graph() as g:
        g.output(mdsl.ops.relu(g.input("x", (3,))), "y")
    feeds = {"x": np.array([-1.0, 0.5, 2.0], np.float32)}
    mdsl.register_op_impl("Relu", lambda x: E.max(x, 1.0), backend="expr")
    assert not bindings.get_binding("Relu", "expr").builtin
    np.testing.assert_array_equal(mdsl.interpret(g, feeds)["y"], [1.0, 1.0, 2.0])


def test_a_later_registration_replaces_the_earlier_one_for_the_same_backend():
    mdsl.register_op_impl("Later", lambda x: 1)
    first = bindings.get_binding("Later", "python")
    mdsl.register_op_impl("Later", lambda x: 2)
    second = bindings.get_binding("Later", "python")
    assert second.fn(None) == 2 and second.serial > first.serial
    assert set(bindings.bindings_of("Later")) == {"python"}


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda x: x, r"must accept fn\(x, shift, \*, scale\)"),
        (lambda x, shift, *, gain: x, r"must accept fn\(x, shift, \*, scale\)"),
        (lambda x, shift, *, scale: "x - shift", "returned str for output 0"),
        (lambda x, shift, *, scale: (x, shift), "returned 2 expressions for 1 outputs"),
        (lambda x, shift, *, scale: x + E.var("bias"), r"uses variables bias.*inputs: x, shift"),
        (lambda x, shift, *, scale: x + np.ones(3), "raised: .*bool, int or float"),
        (lambda x, shift, *, scale: x[0], "raised TypeError"),
    ],
)
def test_a_bad_expr_implementation_fails_at_registration_naming_the_op(fn, match):
    _declare_scaled_shift()
    with pytest.raises(mdsl.GraphError, match="ScaledShift") as info:
        mdsl.register_op_impl("ScaledShift", fn, backend="expr")
    assert info.match(match)
    assert bindings.get_binding("ScaledShift", "expr") is None  # nothing half-registered


def test_what_registration_cannot_check_fails_at_use_time_naming_op_and_node():
    @mdsl.op_proto("Scaled", inputs={"x": "float"}, outputs={"y": "float"},
                   attrs={"k": mdsl.Attr(float)}, category="pointwise")  # fmt: skip
    def scaled(x, *, k):
        return x

    # a required attr: no trial call at registration
    mdsl.register_op_impl("Scaled", lambda x, *, k: "wrong" if k > 1 else x * k, backend="expr")
    with mdsl.Graph() as g:
        with mdsl.scope("blk"):
            y = scaled(g.input("x", (2,)), k=2.0)
        g.output(y, "y")
    with pytest.raises(mdsl.ExecutionError) as info:
        mdsl.interpret(g, {"x": np.ones(2, np.float32)})
    err = info.value
    assert (err.node, err.op_type) == ("blk/Scaled", "Scaled")
    assert "expr implementation of 'Scaled' returned str" in err.message
    assert "layer 'blk'" in err.message and "inputs: x=float32[2]" in err.message


def test_an_expr_implementation_may_be_registered_before_its_prototype():
    mdsl.register_op_impl("Early", lambda a, b: a * b + 1, backend="expr")

    @mdsl.op_proto("Early", inputs={"a": "float", "b": "float"}, outputs={"y": "float"})
    def early(a, b):
        return a

    with mdsl.Graph() as g:
        g.output(early(g.input("a", (3,)), g.input("b", (3,))), "y")
    a, b = np.float32([1, 2, 3]), np.float32([4, 5, 6])
    np.testing.assert_array_equal(mdsl.interpret(g, {"a": a, "b": b})["y"], a * b + 1)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: mdsl.register_op_impl("Foo", lambda x: x, backend="cuda"), "unknown backend"),
        (lambda: mdsl.register_op_impl("Foo", 42), "must be callable"),
        (lambda: mdsl.register_op_impl("Foo", "x + 1", backend="expr"), "must be callable"),
        (lambda: mdsl.register_op_impl("Foo", backend="c"), "source= and symbol="),
    ],
)
def test_bad_registrations_raise_graph_errors(call, match):
    with pytest.raises(mdsl.GraphError, match=match):
        call()


def test_an_op_without_a_runnable_binding_says_how_to_register_one():
    @mdsl.op_proto("Unbound", inputs={"x": "float"}, outputs={"y": "float"})
    def unbound(x):
        return x

    with mdsl.Graph() as g:
        g.output(unbound(g.input("x", (2,))), "y")
    feeds = {"x": np.ones(2, np.float32)}
    with pytest.raises(mdsl.ExecutionError, match=r"mdsl.register_op_impl\('Unbound', fn\)") as e:
        mdsl.interpret(g, feeds)
    assert e.value.node == "Unbound" and "backend='expr'" in e.value.message
    mdsl.register_op_impl("Unbound", backend="c", source="...", symbol="unbound")
    with pytest.raises(mdsl.ExecutionError, match="only a 'c' implementation"):
        mdsl.interpret(g, feeds)
    with pytest.raises(mdsl.ExecutionError, match="impl must be one of auto, python, expr"):
        mdsl.interpret(g, feeds, impl="c")


def test_an_expr_binding_of_an_op_that_is_not_elementwise_is_refused_clearly():
    @mdsl.op_proto("MyMatMul", inputs={"a": "float", "b": "float"}, outputs={"y": "float"})
    def my_matmul(a, b):
        return mdsl.TensorType((a.shape[0], b.shape[1]), a.dtype)

    mdsl.register_op_impl("MyMatMul", lambda a, b: a * b, backend="expr")
    with mdsl.Graph() as g:
        g.output(my_matmul(g.input("a", (2, 3)), g.input("b", (3, 4))), "y")
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((3, 4), np.float32)}
    with pytest.raises(mdsl.ExecutionError, match=r"elementwise.*'a' of shape \[2, 3\].*\[2, 4\]"):
        mdsl.interpret(g, feeds)


def test_expr_results_are_broadcast_to_the_output_shape_and_cast_to_its_dtype():
    @mdsl.op_proto("FillLike", inputs={"x": "float"}, outputs={"y": "int32"},
                   category="pointwise")  # fmt: skip
    def fill_like(x):
        return mdsl.TensorType(x.shape, "int32")

    mdsl.register_op_impl("FillLike", lambda x: 7.9, backend="expr")  # a bare constant
    with mdsl.Graph() as g:
        g.output(fill_like(g.input("x", ("N", 2))), "y")
    y = mdsl.interpret(g, {"x": np.zeros((3, 2), np.float32)})["y"]
    assert y.dtype == np.int32 and y.shape == (3, 2) and y.flags.writeable
    np.testing.assert_array_equal(y, np.full((3, 2), 7, np.int32))


def test_variadic_and_optional_inputs_reach_an_expr_implementation():
    with mdsl.Graph() as g:
        a, b, c = (g.input(n, (3,)) for n in "abc")
        g.output(mdsl.ops.maximum(a, b, c), "max")
        g.output(mdsl.ops.clip(a, None, 0.5), "clip")
    feeds = {
        n: np.random.default_rng(i).normal(size=3).astype(np.float32) for i, n in enumerate("abc")
    }
    got = mdsl.interpret(g, feeds, impl="expr")
    np.testing.assert_array_equal(
        got["max"], np.maximum(np.maximum(feeds["a"], feeds["b"]), feeds["c"])
    )
    np.testing.assert_array_equal(got["clip"], np.minimum(feeds["a"], 0.5))


def _declare_channel_scale():
    @mdsl.op_proto("ChannelScale", inputs={"x": "float", "gain": "float"}, outputs={"y": "float"},
                   attrs={"axis": mdsl.Attr(int, default=1)}, category="pointwise")  # fmt: skip
    def channel_scale(x, gain, *, axis):
        return x

    return channel_scale


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"fusable": True}, r"unknown option fusable .*known: axis_inputs, axis"),
        ({"axis_inputs": ("gain",)}, "axis_inputs without an axis="),
        ({"axis_inputs": ("bias",), "axis": 1}, "names bias, which ChannelScale does not have"),
        ({"axis_inputs": ("gain",), "axis": "dim"}, "names attr dim"),
    ],
)
def test_expr_binding_options_are_checked(options, match):
    _declare_channel_scale()
    with pytest.raises(mdsl.GraphError, match=match):
        mdsl.register_op_impl(
            "ChannelScale", lambda x, gain, *, axis: x * gain, backend="expr", **options
        )


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_per_axis_inputs_are_laid_along_the_axis_an_attr_names(axis):
    channel_scale = _declare_channel_scale()
    mdsl.register_op_impl(
        "ChannelScale",
        lambda x, gain, *, axis: x * gain,
        backend="expr",
        axis_inputs=("gain",),
        axis="axis",
    )
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3, 4))
        gain = g.input("gain", ((2, 3, 4)[axis],))
        g.output(channel_scale(x, gain, axis=axis), "y")
    xv = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    gv = np.arange(1, xv.shape[axis] + 1, dtype=np.float32)
    shape = [1, 1, 1]
    shape[axis] = gv.size
    got = mdsl.interpret(g, {"x": xv, "gain": gv})["y"]
    np.testing.assert_array_equal(got, xv * gv.reshape(shape))
