"""ONNX export: onnx.checker accepts the models, ONNX Runtime computes what mdsl's
interpreter computes, names and layers survive a round trip."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import mdsl
from mdsl import ops
from mdsl.frontends import onnx as mo
from tests.frontends.onnx_models import ort_run
from tests.op_sandbox import restored_registries

RNG = np.random.default_rng(7)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _same_as_interpreter(g, feeds, *, opset=mo.DEFAULT_OPSET, tol=1e-5):
    model = mo.export(g, opset=opset)
    expected = mdsl.interpret(g, feeds)
    got = dict(zip([o.name for o in model.graph.output], ort_run(model, feeds)))
    assert set(got) == set(expected)
    for name, want in expected.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape
        np.testing.assert_allclose(got[name], want, rtol=tol, atol=tol)
    return model


@mdsl.layer
def conv_block(x, cout):
    w = mdsl.param("weight", (cout, x.shape[1], 3, 3), init="normal", scale=0.3)
    y = ops.conv2d(x, w, strides=1, pads=1)
    y = ops.batch_norm(y, mdsl.param("gamma", (cout,), init="ones"), mdsl.param("beta", (cout,), init="zeros"),
                       mdsl.param("mean", (cout,), init="zeros"), mdsl.param("var", (cout,), init="ones"))  # fmt: skip
    return ops.relu(y)


def _cnn():
    with mdsl.Graph("cnn") as g:
        x = g.input("x", ("N", 3, 8, 8))
        y = conv_block(conv_block(x, 4), 4)
        y = ops.max_pool(y, kernel_shape=(2, 2), strides=(2, 2))
        y = ops.global_average_pool(y).reshape(y.shape[0], 4)
        g.output(ops.softmax(y @ mdsl.param("fc", (4, 5)), axis=-1), "probs")
    return g


def test_cnn_with_symbolic_batch_runs_in_onnxruntime_for_two_batch_sizes():
    g = _cnn()
    for batch in (1, 3):
        model = _same_as_interpreter(g, {"x": _rand(batch, 3, 8, 8)})
    x_dims = model.graph.input[0].type.tensor_type.shape.dim
    assert x_dims[0].dim_param == "N" and [d.dim_value for d in x_dims[1:]] == [3, 8, 8]
    # The symbolic Reshape target is computed from the input's shape at run time.
    assert {"Shape", "Gather", "Concat"} <= {n.op_type for n in model.graph.node}


def test_node_names_and_layers_survive_a_round_trip(tmp_path):
    g = _cnn()
    path = tmp_path / "cnn.onnx"
    model = mo.export(g, path)
    assert model.graph.node[0].name == "/conv_block/Conv"
    back = mo.load(path)
    mine = [(n.name, n.op_type) for n in g.nodes]
    assert [(n.name, n.op_type) for n in back.nodes if n.op_type != "Const"] == [
        p for p in mine if p[1] != "Const"
    ]
    assert {"conv_block", "conv_block_1"} <= set(back.layers)
    feeds = {"x": _rand(2, 3, 8, 8)}
    np.testing.assert_allclose(
        mdsl.interpret(back, feeds)["probs"], mdsl.interpret(g, feeds)["probs"], rtol=1e-6
    )


def test_ops_onnx_lacks_are_spelled_in_onnx_ops():
    with mdsl.Graph("spelled") as g:
        x = g.input("x", (2, 5))
        g.output(ops.rsqrt(ops.abs(x) + 1.0), "r")
        g.output(ops.silu(x), "s")
        g.output(ops.gelu(x, approximate="tanh"), "t")
        g.output(ops.gelu(x), "e")
    feeds = {"x": _rand(2, 5)}
    model = _same_as_interpreter(g, feeds, opset=17)  # Gelu is an ONNX op from opset 20
    assert "Gelu" not in {n.op_type for n in model.graph.node}
    assert {n.domain for n in model.graph.node} == {""}
    assert "Gelu" in {n.op_type for n in _same_as_interpreter(g, feeds, opset=20).graph.node}


@pytest.mark.parametrize("opset", [11, 13, 18, 21])
def test_attributes_become_inputs_of_the_target_opset(opset):
    with mdsl.Graph("attrs") as g:
        x = g.input("x", (2, 1, 6))
        y = ops.squeeze(x, axes=[1])
        y = ops.reduce_sum(y, axes=[1], keepdims=True)
        y = ops.pad(ops.clip(y, -1.0, 1.0), pads=[1, 0, 1, 0], constant_value=3.0)
        parts = ops.split(ops.slice(x, starts=[0], ends=[4], axes=[2]), axis=2, num_outputs=2)
        g.output(y, "y")
        g.output(ops.concat([parts[1], parts[0]], axis=2), "z")
        g.output(ops.topk(x, 2, axis=-1)[0], "top")
    model = _same_as_interpreter(g, {"x": _rand(2, 1, 6)}, opset=opset)
    squeeze = next(n for n in model.graph.node if n.op_type == "Squeeze")
    assert (len(squeeze.input) == 2) == (opset >= 13)


def test_custom_ops_go_to_the_mdsl_domain_and_come_back():
    with restored_registries():

        @mdsl.op_proto("ScaledShift", inputs={"x": "float"}, outputs={"y": "float"},
                       attrs={"scale": mdsl.Attr(float, default=2.0), "flip": mdsl.Attr(bool, default=False)})  # fmt: skip
        def scaled_shift(x, *, scale, flip):
            return x

        @mdsl.register_op_impl("ScaledShift")
        def _ref(x, *, scale, flip):
            return (-x if flip else x) * scale

        with mdsl.Graph("custom") as g:
            x = g.input("x", (3,))
            g.output(scaled_shift(ops.relu(x), scale=3.0, flip=True), "y")
        model = mo.export(g)
        node = model.graph.node[-1]
        assert (node.domain, node.op_type) == (mo.MDSL_DOMAIN, "ScaledShift")
        assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute} == {
            "scale": 3.0,
            "flip": 1,
        }
        back = mo.load(model)
        assert back.node("ScaledShift").attrs == {"scale": 3.0, "flip": True}
        x = np.array([-1.0, 0.5, 2.0], np.float32)
        np.testing.assert_allclose(mdsl.interpret(back, {"x": x})["y"], [0.0, -1.5, -6.0])


def test_outputs_that_are_inputs_or_shared_get_identity_nodes():
    with mdsl.Graph("passthrough") as g:
        x = g.input("x", (2,))
        y = ops.relu(x)
        g.output(x, "same")
        g.output(y, "a")
        g.output(y, "b")
    model = _same_as_interpreter(g, {"x": np.array([-1.0, 2.0], np.float32)})
    assert [o.name for o in model.graph.output] == ["same", "a", "b"]


def test_what_onnx_cannot_say_is_refused_clearly():
    with mdsl.Graph("ln") as g:
        x = g.input("x", (2, 4))
        g.output(ops.layer_norm(x, mdsl.param("s", (4,), init="ones")), "y")
    with pytest.raises(mdsl.GraphError, match=r"LayerNormalization.*opset >= 17"):
        mo.export(g, opset=13)
    with pytest.raises(mdsl.GraphError, match="opset must be an int from 9"):
        mo.export(g, opset=3)
    with pytest.raises(mdsl.GraphError, match="takes an mdsl Graph"):
        mo.export("not a graph")


def test_if_and_while_become_onnx_if_and_loop():
    with mdsl.Graph("flow") as g:
        x = g.input("x", ("N", 4))
        n = g.input("n", (), "int64")
        y = mdsl.cond(x.sum() > 10.0, lambda: x * 0.5, lambda: x + 1.0)
        _, acc = mdsl.while_loop(
            lambda i, acc: i < n,
            lambda i, acc: (i + 1, acc * 2.0 + y.sum()),
            (g.const("i0", np.int64(0)), g.const("one", 1.0)),
        )
        g.output(y, "y")
        g.output(acc, "acc")
    for x, trips in ((np.full((2, 4), 3.0, np.float32), 3), (np.ones((1, 4), np.float32), 0)):
        model = _same_as_interpreter(g, {"x": x, "n": np.array(trips, np.int64)})
    assert [n.op_type for n in model.graph.node if n.op_type in ("If", "Loop")] == ["If", "Loop"]
    back = mo.load(model)
    assert {"cond/If", "while/cond/Less"} <= {n.name for n in back.nodes}
    feeds = {"x": np.full((2, 4), 3.0, np.float32), "n": np.array(2, np.int64)}
    assert mdsl.interpret(back, feeds)["acc"] == mdsl.interpret(g, feeds)["acc"]
