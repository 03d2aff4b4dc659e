"""Node and layer naming: nested layers, repeats, explicit names, scopes, `name=`, params."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.user_lines import assert_points_at


@mdsl.layer
def conv_bn_relu(x, cout):
    w = mdsl.param("weight", (cout, x.shape[1]))  # <- param-line
    y = ops.matmul(x, w.T)  # <- matmul-line
    return ops.relu(y)


@mdsl.layer(name="Block")
def basic_block(x):
    y = conv_bn_relu(x, 8)
    y = conv_bn_relu(y, 8)
    return ops.relu(y + x)


def build_two_blocks() -> mdsl.Graph:
    with mdsl.Graph("blocks") as g:
        x = g.input("x", ("N", 8))  # <- input-line
        y = basic_block(basic_block(x))
        g.output(y, "y")  # <- output-line
    return g


BLOCK_NODES = [
    "{b}/conv_bn_relu/weight",
    "{b}/conv_bn_relu/Transpose",
    "{b}/conv_bn_relu/MatMul",
    "{b}/conv_bn_relu/Relu",
    "{b}/conv_bn_relu_1/weight",
    "{b}/conv_bn_relu_1/Transpose",
    "{b}/conv_bn_relu_1/MatMul",
    "{b}/conv_bn_relu_1/Relu",
    "{b}/Add",
    "{b}/Relu",
]


def test_nested_layers_and_repeats_name_every_node():
    g = build_two_blocks()
    expected = ["x"]
    expected += [n.format(b="Block") for n in BLOCK_NODES]
    expected += [n.format(b="Block_1") for n in BLOCK_NODES]
    expected += ["Output_y"]
    assert [n.name for n in g.nodes] == expected


def test_layers_record_path_function_and_nodes():
    g = build_two_blocks()
    assert list(g.layers) == [
        "Block",
        "Block/conv_bn_relu",
        "Block/conv_bn_relu_1",
        "Block_1",
        "Block_1/conv_bn_relu",
        "Block_1/conv_bn_relu_1",
    ]
    inner = g.layers["Block_1/conv_bn_relu_1"]
    assert inner.path == "Block_1/conv_bn_relu_1"
    assert inner.function == f"{__name__}.conv_bn_relu"
    assert inner.parent == "Block_1" and inner.depth == 2
    assert inner.node_names == [
        "Block_1/conv_bn_relu_1/weight",
        "Block_1/conv_bn_relu_1/Transpose",
        "Block_1/conv_bn_relu_1/MatMul",
        "Block_1/conv_bn_relu_1/Relu",
    ]
    # a layer lists only its own nodes, not its children's
    assert g.layers["Block"].node_names == ["Block/Add", "Block/Relu"]
    assert g.layers["Block"].function == f"{__name__}.basic_block"
    assert g.node("Block/conv_bn_relu_1/MatMul").layer == "Block/conv_bn_relu_1"
    assert g.node("x").layer == "" and g.node("Output_y").layer == ""


def test_params_are_path_prefixed_and_deterministic():
    g = build_two_blocks()
    params = [n.name for n in g.constants]
    assert params == [
        "Block/conv_bn_relu/weight",
        "Block/conv_bn_relu_1/weight",
        "Block_1/conv_bn_relu/weight",
        "Block_1/conv_bn_relu_1/weight",
    ]
    values = [n.const_value() for n in g.constants]
    assert all(v.shape == (8, 8) and v.dtype == np.float32 for v in values)
    assert not np.array_equal(values[0], values[1]), "different paths draw different values"
    again = build_two_blocks()
    for name, value in zip(params, values):
        np.testing.assert_array_equal(again.node(name).const_value(), value)


def test_deeply_nested_layers():
    @mdsl.layer
    def inner(x):
        return x + 1.0

    @mdsl.layer
    def middle(x):
        return inner(inner(x))

    @mdsl.layer
    def outer(x):
        return middle(x) * 2.0

    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        g.output(outer(outer(x)), "y")
    arithmetic = [n.name for n in g.nodes if n.op_type in ("Add", "Mul")]
    assert arithmetic == [
        "outer/middle/inner/Add",
        "outer/middle/inner_1/Add",
        "outer/Mul",
        "outer_1/middle/inner/Add",
        "outer_1/middle/inner_1/Add",
        "outer_1/Mul",
    ]
    assert g.layers["outer_1/middle/inner_1"].depth == 3


def test_repeated_op_names_get_suffixes_in_order():
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        y = ops.relu(ops.relu(ops.relu(x)))
        g.output(y, "y")
    assert [n.name for n in g.nodes if n.op_type == "Relu"] == ["Relu", "Relu_1", "Relu_2"]


def test_explicit_node_names_and_collisions():
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        a = ops.relu(x, name="act")
        b = ops.relu(a, name="act")
        c = ops.exp(b, name="Relu")  # a user name may look like an op type
        d = ops.relu(c)  # ... and then the default name is taken
        g.output(d, "y")
    assert [a.name, b.name, c.name, d.name] == ["act", "act_1", "Relu", "Relu_1"]
    assert g.node("Relu").op_type == "Exp"


def test_names_that_already_end_in_a_suffix_stay_unique():
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        a = ops.relu(x, name="Relu_1")
        b, c, d = ops.relu(a), ops.relu(a), ops.relu(a)
        g.output(d, "y")
    names = [a.name, b.name, c.name, d.name]
    assert names == ["Relu_1", "Relu", "Relu_2", "Relu_3"]
    assert len({n.name for n in g.nodes}) == len(g.nodes)


def test_scope_and_layer_paths_combine():
    @mdsl.layer(name="FFN")
    def ffn(x):
        with mdsl.scope("inner"):
            return ops.tanh(x, name="act")

    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        with mdsl.scope("Encoder"):
            with mdsl.scope("Layer"):
                y = ffn(x)
            with mdsl.scope("Layer"):
                z = ffn(y)
            w = mdsl.param("bias", (3,))
        g.output(z + w, "y")
    assert y.name == "Encoder/Layer/FFN/inner/act"
    assert z.name == "Encoder/Layer_1/FFN/inner/act"
    assert w.name == "Encoder/bias"
    assert g.layers["Encoder/Layer_1/FFN"].function.endswith("ffn")
    assert g.layers["Encoder"].function == "" and g.layers["Encoder"].node_names == ["Encoder/bias"]
    assert g.node("Add").layer == ""


def test_scope_is_left_on_exceptions():
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        with pytest.raises(mdsl.ShapeError), mdsl.scope("Broken"):
            ops.matmul(x, g.input("w", (4, 4)))
        y = ops.relu(x)
        g.output(y, "y")
    assert y.name == "Relu"


def test_the_same_layer_function_builds_in_any_graph():
    first, second = build_two_blocks(), build_two_blocks()
    assert [n.name for n in first.nodes] == [n.name for n in second.nodes]
    with mdsl.Graph("other") as g:
        x = g.input("x", (4, 8))
        g.output(conv_bn_relu(x, 8), "y")
    assert g.node("conv_bn_relu/MatMul").outputs[0].shape == (4, 8)
    # the parameter seed depends on its path only: same path, same values in any graph
    np.testing.assert_array_equal(
        g.node("conv_bn_relu/weight").const_value(),
        conv_bn_relu_weight_from(build_standalone()),
    )


def build_standalone() -> mdsl.Graph:
    with mdsl.Graph("standalone") as g:
        g.output(conv_bn_relu(g.input("x", (1, 8)), 8), "y")
    return g


def conv_bn_relu_weight_from(g: mdsl.Graph) -> np.ndarray:
    return g.node("conv_bn_relu/weight").const_value()


def test_layer_keeps_the_function_signature_and_doc():
    @mdsl.layer(name="Named")
    def documented(x, k=2):
        """Docs."""
        return x * float(k)

    assert documented.__name__ == "documented" and documented.__doc__ == "Docs."
    assert documented.__mdsl_layer__ == "Named"


@pytest.mark.parametrize("bad", ["", "a/b", 3, None])
def test_bad_scope_names(bad):
    with mdsl.Graph() as g:
        x = g.input("x", (1,))
        with pytest.raises(mdsl.GraphError, match="layer or scope name"), mdsl.scope(bad):
            pass
        g.output(x, "y")


def test_sources_are_the_users_lines():
    g = build_two_blocks()
    assert_points_at(g.node("x").source, __file__, "input-line")
    assert_points_at(g.node("Output_y").source, __file__, "output-line")
    for block in ("Block", "Block_1"):
        for layer in ("conv_bn_relu", "conv_bn_relu_1"):
            assert_points_at(g.node(f"{block}/{layer}/weight").source, __file__, "param-line")
            assert_points_at(g.node(f"{block}/{layer}/MatMul").source, __file__, "matmul-line")
            # `w.T` is a Tensor method inside mdsl: the recorded line is still the user's
            assert_points_at(g.node(f"{block}/{layer}/Transpose").source, __file__, "matmul-line")


def test_source_of_a_helper_outside_mdsl_is_the_helper_line():
    def helper(x):
        return ops.exp(x)  # <- helper-line

    with mdsl.Graph() as g:
        g.output(helper(g.input("x", (2,))), "y")
    assert_points_at(g.node("Exp").source, __file__, "helper-line")


def test_device_scope_annotates_nodes():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with mdsl.device("npu:0"):
            y = ops.exp(x)
            with mdsl.device("cpu"):
                z = ops.relu(y)
        g.output(z + y, "y")
    assert [g.node(n).device for n in ("x", "Exp", "Relu", "Add")] == [None, "npu:0", "cpu", None]
    with pytest.raises(mdsl.GraphError, match="device name"), mdsl.device(""):
        pass
