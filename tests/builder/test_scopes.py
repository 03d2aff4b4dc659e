"""Naming scopes, `@mdsl.layer`, `mdsl.param`, `mdsl.device` (`mdsl/builder/scopes.py`)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.user_lines import assert_error_at, assert_points_at


@mdsl.layer
def conv_bn_relu(x, cout):
    w = mdsl.param("weight", (x.shape[1], cout))
    y = x @ w
    y = y * mdsl.param("gamma", (cout,), init="ones") + mdsl.param("beta", (cout,), init="zeros")
    return ops.relu(y)


@mdsl.layer(name="Block")
def basic_block(x):
    y = conv_bn_relu(x, 8)
    y = conv_bn_relu(y, 8)
    return ops.relu(y + x)


def _names(g, op_type=None):
    return [n.name for n in g.nodes if op_type is None or n.op_type == op_type]


@pytest.fixture
def resnet_like():
    with mdsl.Graph("resnet_block") as g:
        x = g.input("x", ("N", 8))
        g.output(basic_block(x), "y")
    return g


def test_nested_layers_repeats_and_explicit_name(resnet_like):
    assert _names(resnet_like) == [
        "x",
        "Block/conv_bn_relu/weight",
        "Block/conv_bn_relu/MatMul",
        "Block/conv_bn_relu/gamma",
        "Block/conv_bn_relu/Mul",
        "Block/conv_bn_relu/beta",
        "Block/conv_bn_relu/Add",
        "Block/conv_bn_relu/Relu",
        "Block/conv_bn_relu_1/weight",
        "Block/conv_bn_relu_1/MatMul",
        "Block/conv_bn_relu_1/gamma",
        "Block/conv_bn_relu_1/Mul",
        "Block/conv_bn_relu_1/beta",
        "Block/conv_bn_relu_1/Add",
        "Block/conv_bn_relu_1/Relu",
        "Block/Add",
        "Block/Relu",
        "Output_y",
    ]


def test_params_are_path_prefixed_constants(resnet_like):
    weight = resnet_like.node("Block/conv_bn_relu/weight")
    assert weight.op_type == "Const"
    assert weight.outputs[0].shape == (8, 8)
    gamma = resnet_like.node("Block/conv_bn_relu_1/gamma").const_value()
    np.testing.assert_array_equal(gamma, np.ones(8, np.float32))


def test_hundred_levels_of_nesting():
    def nest(x, depth):
        if depth == 0:
            return ops.exp(x)
        with mdsl.scope(f"L{depth}"):
            return nest(x, depth - 1)

    with mdsl.Graph() as g:
        g.output(nest(g.input("x", (2,)), 100), "y")
    exp = g.node(g.outputs["y"].name)
    assert exp.name.count("/") == 100 and exp.name.endswith("L2/L1/Exp")
    assert len(g.layers) == 100


def test_scope_names_and_node_name_argument():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with mdsl.scope("Head"):
            a = ops.exp(x, name="logits")
            b = ops.exp(a, name="logits")
            c = ops.exp(b)
        with mdsl.scope("Head"):
            d = ops.exp(c)
        e = ops.exp(d, name="final")
        g.output(e, "y")
    assert [t.name for t in (a, b, c, d, e)] == [
        "Head/logits",
        "Head/logits_1",
        "Head/Exp",
        "Head_1/Exp",
        "final",
    ]
    assert g.layers["Head"].function == "" and g.layers["Head"].node_names == [
        "Head/logits",
        "Head/logits_1",
        "Head/Exp",
    ]


def test_user_names_that_look_like_generated_ones_do_not_collide():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        a = ops.exp(x, name="Exp_1")
        b = ops.exp(a)
        c = ops.exp(b)
        d = ops.exp(c)
        g.output(d, "y")
    assert [t.name for t in (a, b, c, d)] == ["Exp_1", "Exp", "Exp_2", "Exp_3"]


@pytest.mark.parametrize("bad", [3, ("a",), b"Exp"])
def test_node_name_must_be_a_string(bad):
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.GraphError) as e:
            ops.exp(x, name=bad)  # <- bad-name
        g.output(x, "y")
    assert_points_at(e.value.source, __file__, "bad-name")
    assert str(e.value) == f"Exp at {e.value.source}: name= must be a string, got {bad!r}"
    assert [n.name for n in g.nodes] == ["x", "Output_y"]


def test_layer_reused_in_another_graph_starts_its_names_again():
    graphs = []
    for name in ("a", "b"):
        with mdsl.Graph(name) as g:
            g.output(basic_block(g.input("x", (1, 8))), "y")
        graphs.append(g)
    assert _names(graphs[0]) == _names(graphs[1])
    # parameters are drawn from their path: the same layer code gives the same weights
    w = [g.node("Block/conv_bn_relu/weight").const_value() for g in graphs]
    np.testing.assert_array_equal(w[0], w[1])
    assert w[0].std() > 0


def test_scope_outside_a_graph():
    with pytest.raises(mdsl.GraphError, match="used outside a graph"), mdsl.scope("S"):
        pass


def test_scope_is_restored_after_an_exception():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(ZeroDivisionError), mdsl.scope("S"):
            1 / 0
        g.output(ops.exp(x), "y")
    assert g.outputs["y"].name == "Exp"


def test_graph_resets_scope_of_an_enclosing_graph():
    with mdsl.Graph("outer") as outer, mdsl.scope("Outer"):
        x = outer.input("x", (2,))
        with mdsl.Graph("inner") as inner:
            inner.output(ops.exp(inner.input("x", (2,))), "y")
        outer.output(ops.exp(x), "y")
    assert inner.outputs["y"].name == "Exp"
    assert outer.outputs["y"].name == "Outer/Exp"


# -- params ---------------------------------------------------------------------------------
def test_param_inits_and_determinism():
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        with mdsl.scope("P"):
            zeros = mdsl.param("z", (3,), init="zeros")
            ones = mdsl.param("o", (3,), dtype="float16", init="ones")
            normal = mdsl.param("n", (1000,), init="normal", scale=0.5)
            uniform = mdsl.param("u", (1000,), init="uniform", scale=0.25)
            seeded = mdsl.param("s", (4,), seed=7)
            given = mdsl.param("g", (2, 2), dtype="int32", init=np.arange(4).reshape(2, 2))
        g.output(x + zeros + ones.astype("float32"), "y")
    value = {t.name: g.node(t.name).const_value() for t in (zeros, ones, normal, uniform, given)}
    assert value["P/z"].dtype == np.float32 and not value["P/z"].any()
    assert value["P/o"].dtype == np.float16 and (value["P/o"] == 1).all()
    assert abs(value["P/n"].std() - 0.5) < 0.05 and value["P/n"].dtype == np.float32
    assert value["P/u"].min() >= -0.25 and value["P/u"].max() <= 0.25 and value["P/u"].std() > 0.1
    np.testing.assert_array_equal(value["P/g"], np.arange(4, dtype=np.int32).reshape(2, 2))
    assert value["P/g"].dtype == np.int32
    assert not value["P/n"].flags.writeable
    with mdsl.Graph() as g2:
        with mdsl.scope("P"):
            again = mdsl.param("s", (4,), seed=7)
            other_seed = mdsl.param("s2", (4,), seed=8)
        g2.output(again + other_seed, "y")
    np.testing.assert_array_equal(
        g.node(seeded.name).const_value(), g2.node(again.name).const_value()
    )


def test_normal_params_have_the_normal_distribution():
    with mdsl.Graph() as g:
        w = mdsl.param("w", (400, 500), scale=2.0)
        scalar = mdsl.param("s", ())
        empty = mdsl.param("e", (0, 3), init="uniform")
        g.output(w, "y")
    v = g.node(w.name).const_value().astype(np.float64) / 2.0
    assert v.shape == (400, 500) and abs(v.mean()) < 0.01 and abs(v.std() - 1) < 0.01
    for k, share in ((1, 0.6827), (2, 0.9545), (3, 0.9973)):  # the 68-95-99.7 rule
        assert abs((np.abs(v) < k).mean() - share) < 0.005
    assert abs(((v - v.mean()) ** 4).mean() / v.var() ** 2 - 3) < 0.05  # kurtosis
    assert len(np.unique(v)) > 60000  # a fine table, not a few levels
    assert g.node(scalar.name).const_value().shape == ()
    assert g.node(empty.name).const_value().shape == (0, 3)


def test_param_values_are_deferred_until_needed():
    with mdsl.Graph() as g:
        w = mdsl.param("w", (4096, 4096))
        g.output(w, "y")
    from mdsl.ir.initializer import ParamInit

    assert isinstance(g.node("w").attrs["value"], ParamInit)
    assert not g.node("w").attrs["value"]._value  # nothing drawn yet
    value = g.node("w").const_value()
    assert value.shape == (4096, 4096) and not value.flags.writeable
    # the recipe stays in the graph (CSE and the compile cache key read it), with the value
    assert isinstance(g.node("w").attrs["value"], ParamInit)
    assert g.node("w").const_value() is value  # drawn once


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"shape": (-1, 2)}, mdsl.ShapeError, "negative dim -1"),
        ({"shape": (2**41,)}, mdsl.ShapeError, "absurd dim"),
        ({"shape": ("N", 2)}, mdsl.GraphError, "must be static"),
        ({"shape": (2,), "init": "glorot"}, mdsl.GraphError, "init must be an ndarray or one of"),
        ({"shape": (2,), "dtype": "complex64"}, mdsl.DTypeError, "unknown dtype 'complex64'"),
        ({"shape": (3,), "init": np.zeros(2)}, mdsl.GraphError, r"init array shape \(2,\)"),
    ],
)
def test_bad_params_name_the_param_and_the_line(kwargs, error, message):
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with mdsl.scope("Enc"), pytest.raises(error, match=message) as info:
            mdsl.param("w", **kwargs)  # <- bad-param
        g.output(x, "y")
    assert_error_at(info.value, __file__, "bad-param", node="Enc/w", op_type="Const")


def test_param_outside_a_graph():
    with pytest.raises(mdsl.GraphError, match="param 'w' used outside a graph"):
        mdsl.param("w", (2,))


# -- two threads build two graphs at once -----------------------------------------------------
def test_two_threads_build_two_graphs_at_once():
    """Interleave two builders step by step: context variables keep their graphs and scopes
    apart (a global 'current graph' would put nodes in the wrong graph)."""
    barrier = threading.Barrier(2, timeout=10)
    results, errors = {}, []

    @mdsl.layer
    def step(x, i):
        barrier.wait()
        return ops.exp(x, name=f"e{i}")

    def build(tag, width):
        try:
            with mdsl.Graph(tag) as g:
                y = g.input("x", (width,))
                with mdsl.scope(tag.upper()):
                    for i in range(20):
                        y = step(y, i)
                g.output(y, "y")
            results[tag] = g
        except Exception as e:  # reported below: a thread cannot fail the test itself
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=build, args=(t, w)) for t, w in (("a", 3), ("b", 5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for tag, width in (("a", 3), ("b", 5)):
        g = results[tag]
        mdsl.ir.verify(g)
        exps = [n for n in g.nodes if n.op_type == "Exp"]
        assert len(g) == 22 and len(exps) == 20
        assert exps[0].name == f"{tag.upper()}/step/e0"
        assert exps[-1].name == f"{tag.upper()}/step_19/e19"
        assert all(n.graph is g and n.outputs[0].shape == (width,) for n in exps)
