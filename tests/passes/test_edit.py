"""Graph-editing helpers: custom-op replacement, inputs/outputs, extract and inline."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.passes import (
    add_input,
    add_output,
    clone_graph,
    extract_layer,
    inline_graph,
    remove_output,
    rename_input,
    rename_output,
    replace_with_op,
)
from tests.op_sandbox import restored_registries
from tests.passes.checks import assert_preserves_results, op_types, random_feeds
from tests.passes.random_graphs import assert_same_outputs


def gelu_tanh_graph():
    @mdsl.layer
    def act(x):
        inner = (x + 0.044715 * x * x * x) * 0.7978845608
        return 0.5 * x * (ops.tanh(inner) + 1.0)

    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 4))
        g.output(act(x) * 3.0, "y")
    return g


def test_replace_a_run_of_small_ops_by_one_custom_op():
    with restored_registries():

        @mdsl.op_proto("MyGelu", inputs={"x": "float"}, outputs={"y": "float"})
        def my_gelu(x):
            return x

        @mdsl.register_op_impl("MyGelu")
        def _my_gelu(x):
            return (0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))).astype(x.dtype)

        g = gelu_tanh_graph()
        edited = clone_graph(g)
        run = [n for n in edited if n.layer == "act"]
        node = replace_with_op(edited, run, "MyGelu")
        assert op_types(edited) == ["Input", "MyGelu", "Const", "Mul", "Output"]
        assert node.inputs == [edited.inputs["x"]] and node.layer == "act"
        assert edited.node("Mul").inputs[0] is node.output
        mdsl.ir.verify(edited)
        assert_preserves_results(g, edited, rtol=1e-5, atol=1e-6)


def test_replace_checks_the_new_op_types():
    g = gelu_tanh_graph()
    run = [n for n in g if n.layer == "act"]
    with pytest.raises(mdsl.GraphError, match=r"ReduceSum would produce float32\[\]"):
        replace_with_op(g, run, "ReduceSum", {"keepdims": False})
    with pytest.raises(mdsl.GraphError, match="not an op node"):
        replace_with_op(g, ["x"], "Relu")
    with pytest.raises(mdsl.GraphError, match="at least one node"):
        replace_with_op(g, [], "Relu")
    assert len(g) == len(gelu_tanh_graph())  # nothing changed by the failed attempts


def test_inputs_and_outputs_can_be_added_renamed_and_removed():
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        g.output(ops.exp(x), "e")
        g.output(x + 1.0, "p")
    bias = add_input(g, "bias", (3,))
    assert list(g.inputs) == ["x", "bias"] and op_types(g)[:2] == ["Input", "Input"]
    rename_input(g, "x", "data")
    assert list(g.inputs) == ["data", "bias"]
    add_output(g, bias, "bias_out")
    rename_output(g, "e", "exp")
    assert list(g.outputs) == ["exp", "p", "bias_out"] and g.has_node("Output_exp")
    remove_output(g, "p")
    mdsl.ir.verify(g)
    out = mdsl.interpret(g, {"data": np.zeros(3, np.float32), "bias": np.ones(3, np.float32)})
    assert sorted(out) == ["bias_out", "exp"]
    np.testing.assert_array_equal(out["bias_out"], np.ones(3))
    assert op_types(mdsl.passes.run(g, ["dce"])).count("Add") == 0


def test_input_output_edit_errors():
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        g.output(x * 2.0, "y")
    with pytest.raises(mdsl.GraphError, match="already taken"):
        add_input(g, "x", (3,))
    with pytest.raises(mdsl.ShapeError, match="input 'z'"):
        add_input(g, "z", "not a shape!")
    with pytest.raises(mdsl.GraphError, match="has no input 'nope'"):
        rename_input(g, "nope", "z")
    with pytest.raises(mdsl.GraphError, match="already taken"):
        add_output(g, x, "y")
    with pytest.raises(mdsl.GraphError, match="has no output 'nope'"):
        rename_output(g, "nope", "z")
    with pytest.raises(mdsl.GraphError, match="only output"):
        remove_output(g, "y")


def resnet_like():
    @mdsl.layer
    def conv_relu(x, cout):
        w = mdsl.param("weight", (cout, x.shape[1], 3, 3))
        return ops.relu(ops.conv2d(x, w, pads=1))

    @mdsl.layer(name="Block")
    def block(x):
        return ops.relu(conv_relu(conv_relu(x, 4), 4) + x)

    with mdsl.Graph("net") as g:
        x = g.input("x", ("N", 4, 5, 5))
        scale = g.const("scale", np.float32(0.5))
        g.output(block(x * scale) * scale, "y")
    return g


def test_extract_layer_as_a_standalone_graph():
    g = resnet_like()
    sub = extract_layer(g, "Block")
    assert sub.name == "Block"
    assert list(sub.inputs) == ["Mul"]  # the tensor entering the layer
    assert list(sub.outputs) == ["Relu"]  # Block/Relu, named relative to the layer
    assert set(sub.layers) == {"Block", "Block/conv_relu", "Block/conv_relu_1"}
    assert [n.op_type for n in sub if n.op_type not in ("Const",)] == [
        "Input",
        "Conv",
        "Relu",
        "Conv",
        "Relu",
        "Add",
        "Relu",
        "Output",
    ]
    mdsl.ir.verify(sub)
    assert len(g) == len(resnet_like())  # the source graph is untouched
    feeds = random_feeds(g)
    captured = mdsl.interpret(g, feeds, capture=True)
    got = mdsl.interpret(sub, {"Mul": captured["Mul"]})
    np.testing.assert_allclose(got["Relu"], captured["Block/Relu"], rtol=1e-6)


def test_extract_layer_copies_outside_constants_in_and_rejects_unknown_layers():
    @mdsl.layer
    def uses_outer(x, c):
        return x * c

    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        c = g.const("c", np.array([1, 2, 3], np.float32))
        g.output(uses_outer(x, c), "y")
    sub = extract_layer(g, "uses_outer")
    assert list(sub.inputs) == ["x"] and op_types(sub) == ["Input", "Const", "Mul", "Output"]
    with pytest.raises(mdsl.GraphError, match="no layer 'nope'"):
        extract_layer(g, "nope")


def test_inline_graph_round_trip():
    g = resnet_like()
    block = extract_layer(g, "Block")
    with mdsl.Graph("rebuilt") as h:
        x = h.input("x", ("N", 4, 5, 5))
        h.output(x * 0.5, "half")
    outs = inline_graph(h, block, {"Mul": h.outputs["half"]}, prefix="")
    add_output(h, outs["Relu"], "block")
    mdsl.ir.verify(h)
    assert "Block/conv_relu/Conv" in [n.name for n in h]
    feeds = random_feeds(g)
    want = mdsl.interpret(g, feeds)["y"]
    got = mdsl.interpret(h, feeds)["block"] * np.float32(0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_inline_graph_specializes_symbolic_dims_and_checks_feeds():
    with mdsl.Graph("double") as sub:
        v = sub.input("v", ("N", 2))
        sub.output(v.reshape(0, 2, 1) * 2.0, "out")
    with mdsl.Graph("main") as g:
        g.output(g.input("x", (3, 2)) + 1.0, "y")
    outs = inline_graph(g, sub, {"v": g.outputs["y"]}, prefix="twice")
    assert outs["out"].shape == (3, 2, 1)
    assert g.node("twice/Mul").layer == "twice"
    add_output(g, outs["out"], "z")
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    assert_same_outputs(mdsl.interpret(g, {"x": x}), {"y": x + 1, "z": ((x + 1) * 2)[..., None]})
    with pytest.raises(mdsl.GraphError, match="missing \\['v'\\]"):
        inline_graph(g, sub, {})
    with pytest.raises(mdsl.GraphError, match="is float32\\[3\\]"):
        with mdsl.Graph("other") as o:
            o.output(o.input("w", (3,)) * 1.0, "w")
        inline_graph(o, sub, {"v": o.outputs["w"]})
