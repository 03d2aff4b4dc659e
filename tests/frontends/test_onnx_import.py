"""ONNX import: structure, names, symbolic dims, compile-time values, errors.

Expected values come from ONNX's reference evaluator (onnx.reference), never from mdsl.
"""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import mdsl
from mdsl.frontends import onnx as mo
from tests.frontends.onnx_models import FLOAT, init, model, ort_run, reference, value

INT64 = TensorProto.INT64


def _run(g, feeds):
    return list(mdsl.interpret(g, {mo.mdsl_name(k): v for k, v in feeds.items()}).values())


def _close(got, want, tol=1e-5):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# -- structure and names ---------------------------------------------------------------------
def test_node_names_become_layers_and_initializers_constants():
    nodes = [
        helper.make_node(
            "MatMul", ["x", "encoder.w"], ["h"], name="/encoder/layer.0/attention/MatMul"
        ),
        helper.make_node("Relu", ["h"], ["y"], name="/encoder/layer.0/Relu"),
    ]
    m = model(nodes, [value("x", ["N", 4])], [value("y", ["N", 3])],
              initializers=[init("encoder.w", np.ones((4, 3), np.float32))])  # fmt: skip
    g = mo.load(m)
    assert [n.name for n in g.nodes] == [
        "x",
        "encoder.w",
        "encoder/layer.0/attention/MatMul",
        "encoder/layer.0/Relu",
        "Output_y",
    ]
    assert g.node("encoder/layer.0/attention/MatMul").layer == "encoder/layer.0/attention"
    assert {"encoder", "encoder/layer.0", "encoder/layer.0/attention"} <= set(g.layers)
    assert g.layers["encoder/layer.0"].node_names == ["encoder/layer.0/Relu"]
    assert g.node("encoder.w").op_type == "Const"
    np.testing.assert_array_equal(g.node("encoder.w").const_value(), np.ones((4, 3)))


def test_scope_less_node_names_get_layers_from_their_weights():
    """Caffe2-style names (`n0`, weights `gpu_0/res2_0_branch2a_w_0`): layers come from the
    weights, a number part is a level, the residual Add joins its branch's block."""
    w = lambda name, n: init(name, np.full((2, 2), n, np.float32))  # noqa: E731
    nodes = [
        helper.make_node("MatMul", ["x", "gpu_0/res2_0_branch2a_w_0"], ["a"], name="n0"),
        helper.make_node("Relu", ["a"], ["b"], name="n1"),
        helper.make_node("MatMul", ["x", "gpu_0/res2_0_branch1_w_0"], ["c"], name="n2"),
        helper.make_node("Add", ["b", "c"], ["d"], name="n3"),
        helper.make_node("MatMul", ["d", "gpu_0/res2_1_branch2a_w_0"], ["e"], name="n4"),
        helper.make_node("Add", ["e", "d"], ["y"], name="n5"),
    ]
    weights = ["gpu_0/res2_0_branch2a_w_0", "gpu_0/res2_0_branch1_w_0", "gpu_0/res2_1_branch2a_w_0"]
    m = model(nodes, [value("x", [2, 2])], [value("y", [2, 2])],
              initializers=[w(name, i + 1) for i, name in enumerate(weights)])  # fmt: skip
    g = mo.load(m)
    layer_of = {n.op_type + str(i): n.layer for i, n in enumerate(g.nodes)}
    assert [n.layer for n in g.nodes if n.op_type not in ("Input", "Const", "Output")] == [
        "res2/0/branch2a",
        "res2/0/branch2a",
        "res2/0/branch1",
        "res2/0",
        "res2/1/branch2a",
        "res2/1",
    ], layer_of
    assert g.node("res2/0/branch1/res2_0_branch1_w_0").op_type == "Const"  # weights too
    assert not any(p.startswith(("gpu_0", "n")) for p in g.layers)
    _close(
        _run(g, {"x": np.eye(2, dtype=np.float32)}),
        reference(m, {"x": np.eye(2, dtype=np.float32)}),
    )


def test_scoped_node_names_are_kept_and_weightless_unnamed_nodes_stay_at_the_top():
    nodes = [
        helper.make_node("MatMul", ["x", "fc.weight"], ["h"], name="/fc/MatMul"),
        helper.make_node("Relu", ["h"], ["y"], name="relu_0"),  # no scope: not inferred
    ]
    m = model(nodes, [value("x", [2, 2])], [value("y", [2, 2])],
              initializers=[init("fc.weight", np.ones((2, 2), np.float32))])  # fmt: skip
    assert [n.layer for n in mo.load(m).nodes if n.op_type in ("MatMul", "Relu")] == ["fc", ""]
    plain = [helper.make_node("Relu", ["x"], ["y"])]
    g = mo.load(model(plain, [value("x", [2])], [value("y", [2])]))
    assert [n.layer for n in g.nodes] == ["", "", ""]


def test_a_scope_less_composite_node_gets_a_layer_named_after_its_op_not_its_onnx_name():
    nodes = [
        helper.make_node("MatMul", ["x", "fc_w"], ["h"], name="n0"),
        helper.make_node("Sum", ["h", "h", "x"], ["y"], name="n7"),  # several mdsl ops
    ]
    m = model(nodes, [value("x", [2, 2])], [value("y", [2, 2])],
              initializers=[init("fc_w", np.eye(2, dtype=np.float32))])  # fmt: skip
    g = mo.load(m)
    assert g.node("fc/MatMul").layer == "fc"
    assert {n.layer for n in g.nodes if n.op_type == "Add"} == {"fc/Sum"}  # the join: fc's
    assert not any("n7" in path for path in g.layers)
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    _close(_run(g, {"x": x}), reference(m, {"x": x}))


def test_resnet50_from_the_light_zoo_reads_as_stages_blocks_and_branches():
    from mdsl.frontends.onnx_light_models import light_model_names, load_light_model

    if "resnet50" not in light_model_names():
        pytest.skip("the installed onnx package ships no light ResNet-50")
    g = mo.load(load_light_model("resnet50"))
    top = {p for p in g.layers if "/" not in p}
    assert {"conv1", "res2", "res3", "res4", "res5", "pred"} <= top
    parts = {part for path in g.layers for part in path.split("/")}
    assert not any(re.fullmatch(r"n\d+|gpu_0", part) for part in parts)  # no ONNX node names
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert len(convs) == 53 and all(n.layer for n in convs)
    blocks = {n.layer.rpartition("/")[0] for n in convs if n.layer.startswith("res4/")}
    assert blocks == {f"res4/{i}" for i in range(6)}  # ResNet-50's stage 4 has six blocks


def test_dim_params_become_symbols_shared_across_inputs():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    dims = helper.make_tensor_value_info("b", FLOAT, ["batch", None])
    m = model(nodes, [value("a", ["batch", 5]), dims], [value("y", ["batch", 5])])
    g = mo.load(m)
    a, b = g.inputs["a"].shape, g.inputs["b"].shape
    assert a[0] == b[0] == mdsl.Dim("batch")
    assert isinstance(b[1], mdsl.Dim) and b[1].name == "b_1"  # an unnamed dim: a fresh symbol
    out = mdsl.interpret(g, {"a": np.ones((3, 5), np.float32), "b": np.ones((3, 5), np.float32)})
    np.testing.assert_array_equal(out["y"], np.full((3, 5), 2.0, np.float32))


def test_initializer_listed_as_input_is_a_constant():
    nodes = [helper.make_node("Add", ["x", "bias"], ["y"])]
    m = model(nodes, [value("x", [2]), value("bias", [2])], [value("y", [2])],
              initializers=[init("bias", np.array([1.0, 2.0], np.float32))])  # fmt: skip
    g = mo.load(m)
    assert list(g.inputs) == ["x"]
    np.testing.assert_array_equal(
        mdsl.interpret(g, {"x": np.zeros(2, np.float32)})["y"], [1.0, 2.0]
    )


def test_colons_in_value_names_are_replaced():
    nodes = [helper.make_node("Relu", ["input:0"], ["out:0"], name="scope/Relu:0")]
    g = mo.load(model(nodes, [value("input:0", [2])], [value("out:0", [2])]))
    assert list(g.inputs) == ["input_0"] and list(g.outputs) == ["out_0"]
    assert g.has_node("scope/Relu_0")


def test_load_from_path_and_bytes(tmp_path):
    m = model([helper.make_node("Neg", ["x"], ["y"])], [value("x", [3])], [value("y", [3])])
    path = tmp_path / "neg.onnx"
    path.write_bytes(m.SerializeToString())
    for source in (str(path), path, m.SerializeToString()):
        g = mo.load(source)
        assert [n.op_type for n in g.nodes] == ["Input", "Neg", "Output"]
    assert g.node("Neg").source == "model"  # bytes have no file name


# -- compile-time values ----------------------------------------------------------------------
def _shape_chain_model(batch):
    """x.view(x.size(0), -1) the way exporters write it: Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="/Shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="/Gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="/Unsqueeze"),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], name="/Concat", axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="/Reshape"),
    ]
    inits = [
        init("zero", np.array(0, np.int64)),
        init("axes0", np.array([0], np.int64)),
        init("minus1", np.array([-1], np.int64)),
    ]
    return model(nodes, [value("x", [batch, 3, 4])], [value("y", [batch, 12])], initializers=inits)


@pytest.mark.parametrize("batch", [2, "N"])
def test_shape_computations_fold_into_reshape_attr(batch):
    g = mo.load(_shape_chain_model(batch))
    assert [n.op_type for n in g.nodes if n.op_type != "Const"] == ["Input", "Reshape", "Output"]
    shape = g.node("Reshape").attrs["shape"]
    assert shape == ((2 if batch == 2 else mdsl.Dim("N")), -1)
    for n in (2, 5) if batch == "N" else (2,):
        x = np.arange(n * 12, dtype=np.float32).reshape(n, 3, 4)
        _close(_run(g, {"x": x}), reference(_shape_chain_model(batch), {"x": x}))


def test_shape_value_used_at_run_time_keeps_its_nodes():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceProd", ["sf"], ["count"], keepdims=0),
        helper.make_node("Div", ["x", "count"], ["y"]),
    ]
    m = model(nodes, [value("x", ["N", 2])], [value("y", ["N", 2])])
    g = mo.load(m)
    assert [n.op_type for n in g.nodes] == ["Input", "Shape", "Cast", "ReduceProd", "Div", "Output"]
    x = np.ones((3, 2), np.float32)
    _close(_run(g, {"x": x}), reference(m, {"x": x}))


def test_constant_subgraph_needed_as_tensor_is_imported_as_nodes():
    nodes = [
        helper.make_node("Constant", [], ["w"], value=init("wv", np.eye(2, dtype=np.float32))),
        helper.make_node("Transpose", ["w"], ["wt"], name="/wt"),
        helper.make_node("MatMul", ["x", "wt"], ["y"]),
    ]
    m = model(nodes, [value("x", [1, 2])], [value("y", [1, 2])])
    g = mo.load(m)
    assert [n.op_type for n in g.nodes] == ["Input", "Const", "Transpose", "MatMul", "Output"]


def test_run_time_value_for_an_attribute_is_refused_with_its_name():
    nodes = [helper.make_node("Squeeze", ["x", "axes"], ["y"], name="/r/Squeeze")]
    m = model(nodes, [value("x", [1, 6]), value("axes", [1], INT64)], [value("y", [6])])
    with pytest.raises(
        mdsl.GraphError, match=r"r/Squeeze \(Squeeze\).*input 1 \(axes\) must be known"
    ):
        mo.load(m)


# -- opset versions ---------------------------------------------------------------------------
def _versions_model(opset: int):
    """Squeeze, ReduceSum, Split, Clip, Pad and Softmax in the spelling of `opset`."""
    inits, nodes = [], []
    if opset < 13:
        nodes += [
            helper.make_node("Squeeze", ["x"], ["sq"], axes=[0]),
            helper.make_node("ReduceSum", ["sq"], ["rs"], axes=[1], keepdims=1),
            helper.make_node("Split", ["rs"], ["a", "b"], axis=0, split=[1, 2]),
        ]
    else:
        inits += [init("ax0", np.array([0], np.int64)), init("ax1", np.array([1], np.int64)),
                  init("sizes", np.array([1, 2], np.int64))]  # fmt: skip
        nodes += [
            helper.make_node("Squeeze", ["x", "ax0"], ["sq"]),
            helper.make_node("ReduceSum", ["sq", "ax1"], ["rs"], keepdims=1),
            helper.make_node("Split", ["rs", "sizes"], ["a", "b"], axis=0),
        ]
    if opset < 11:
        nodes += [
            helper.make_node("Clip", ["b"], ["c"], min=-1.0, max=2.0),
            helper.make_node("Pad", ["c"], ["p"], pads=[0, 1, 0, 1], value=5.0),
        ]
    else:
        inits += [init("lo", np.array(-1.0, np.float32)), init("hi", np.array(2.0, np.float32)),
                  init("pads", np.array([0, 1, 0, 1], np.int64)), init("v", np.array(5.0, np.float32))]  # fmt: skip
        nodes += [
            helper.make_node("Clip", ["b", "lo", "hi"], ["c"]),
            helper.make_node("Pad", ["c", "pads", "v"], ["p"]),
        ]
    nodes.append(helper.make_node("Softmax", ["x"], ["sm"], axis=1))
    outputs = [value("a", None), value("p", None), value("sm", None)]
    return model(nodes, [value("x", [1, 3, 4])], outputs, initializers=inits, opset=opset)


@pytest.mark.parametrize("opset", [9, 11, 13, 18])
def test_ops_whose_signature_changed_across_opsets(opset):
    """Against ONNX Runtime: onnx's reference evaluator gives Softmax of every opset the
    opset-13 meaning."""
    m = _versions_model(opset)
    x = np.random.default_rng(opset).standard_normal((1, 3, 4)).astype(np.float32)
    g = mo.load(m)
    _close(_run(g, {"x": x}), ort_run(m, {"x": x}))
    softmax_legacy = opset < 13  # softmax over dims 1.. flattened: a Flatten/Reshape pair
    assert g.has_node("Softmax/Flatten") == softmax_legacy


def test_upsample_of_opset_9_is_a_resize():
    scales = init("scales", np.array([1, 1, 2, 2], np.float32))
    nodes = [helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")]
    m = model(
        nodes,
        [value("x", [1, 1, 2, 2])],
        [value("y", [1, 1, 4, 4])],
        initializers=[scales],
        opset=9,
    )
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    g = mo.load(m)
    assert g.node("Resize").attrs["scales"] == (1.0, 1.0, 2.0, 2.0)
    _close(_run(g, {"x": x}), [np.repeat(np.repeat(x, 2, axis=2), 2, axis=3)])


# -- outputs mdsl lacks ---------------------------------------------------------------------
def test_layer_norm_extra_outputs_unused_import_and_used_are_computed():
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=-1)]
    inits = [init("s", np.full(4, 2.0, np.float32)), init("b", np.ones(4, np.float32))]
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    only_y = model(nodes, [value("x", [2, 4])], [value("y", [2, 4])], initializers=inits)
    g = mo.load(only_y)
    assert [n.op_type for n in g.nodes if n.op_type not in ("Const", "Input", "Output")] == [
        "LayerNormalization"
    ]
    _close(_run(g, {"x": x}), reference(only_y, {"x": x}))
    all_three = model(nodes, [value("x", [2, 4])], [value("y", None), value("mean", None), value("inv", None)],
                      initializers=inits)  # fmt: skip
    _close(_run(mo.load(all_three), {"x": x}), reference(all_three, {"x": x}))


def test_used_maxpool_indices_are_refused():
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2], name="/pool")]
    m = model(nodes, [value("x", [1, 1, 4])], [value("y", None), value("idx", None, INT64)])
    with pytest.raises(mdsl.GraphError, match=r"pool \(MaxPool\).*output 1 \('idx'\) is used"):
        mo.load(m)


# -- errors ------------------------------------------------------------------------------------
def test_unsupported_ops_are_listed_with_counts_their_first_nodes_and_how_to_add_one():
    nodes = [helper.make_node("Foo", ["x"], ["a0"], name="foo0", domain="my.ops")]
    nodes += [
        helper.make_node("Foo", [f"a{k}"], [f"a{k + 1}"], name=f"foo{k + 1}", domain="my.ops")
        for k in range(4)
    ]
    nodes += [
        helper.make_node("Bar", ["a4"], ["c"], domain="my.ops"),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    m = model(nodes, [value("x", [1, 1, 4, 4])], [value("y", None)])
    m.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.raises(mdsl.GraphError) as info:
        mo.load(m)
    message = str(info.value)
    assert (
        "unsupported op types: my.ops.Bar (1: unnamed -> 'c'); "
        "my.ops.Foo (5: 'foo0', 'foo1', 'foo2', ...)"
    ) in message
    assert "@mdsl.op_proto" in message and "custom_ops=" in message


def test_unsupported_types_and_domains_are_listed():
    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Foo", ["y"], ["z"], domain="my.ops"),
    ]
    m = model(nodes, [value("x", [2], TensorProto.COMPLEX64)], [value("z", None)])
    m.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.raises(mdsl.GraphError, match=r"my\.ops\.Foo \(1: .*x: COMPLEX64"):
        mo.load(m)


@pytest.mark.parametrize(
    "source, message",
    [
        (b"\x08\x01garbage that is not protobuf \xff\xff", "not a valid ONNX model"),
        (b"", "opset_import"),
        ("/nonexistent/model.onnx", "no ONNX file"),
        (42, "takes a path, bytes or an onnx.ModelProto"),
    ],
)
def test_malformed_sources_give_mdsl_errors(source, message):
    with pytest.raises(mdsl.MdslError, match=message):
        mo.load(source)


def test_truncated_file_gives_an_mdsl_error(tmp_path):
    m = _shape_chain_model(2).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(m[: len(m) // 2])
    with pytest.raises(mdsl.MdslError):
        mo.load(path)


def test_broken_graphs_give_mdsl_errors():
    dangling = model(
        [helper.make_node("Relu", ["nowhere"], ["y"])], [value("x", [2])], [value("y", None)]
    )
    with pytest.raises(mdsl.GraphError, match="'nowhere' is used before"):
        mo.load(dangling)
    too_new = model(
        [helper.make_node("Relu", ["x"], ["y"])], [value("x", [2])], [value("y", None)], opset=99
    )
    with pytest.raises(mdsl.GraphError, match="opset 99 is outside"):
        mo.load(too_new)
    no_shape = model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", FLOAT, None)],
                     [value("y", None)])  # fmt: skip
    with pytest.raises(mdsl.GraphError, match="'x' has no shape"):
        mo.load(no_shape)
    wrong_attr = model([helper.make_node("Conv", ["x", "w"], ["y"], bogus=3)],
                       [value("x", [1, 1, 3, 3]), value("w", [1, 1, 1, 1])], [value("y", None)])  # fmt: skip
    with pytest.raises(mdsl.GraphError, match="attribute bogus=3 is not supported"):
        mo.load(wrong_attr)
    bad_shape = model([helper.make_node("MatMul", ["a", "b"], ["y"], name="/mm")],
                      [value("a", [2, 3]), value("b", [4, 5])], [value("y", None)])  # fmt: skip
    with pytest.raises(mdsl.ShapeError, match=r"mm \(MatMul\) at m: K of a \(3\)"):
        mo.load(bad_shape)


# -- control flow -----------------------------------------------------------------------------
def test_if_branches_become_subgraphs_and_only_the_taken_one_runs():
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t"])], "then", [], [value("t", None)],
        initializer=[init("two", np.array(2.0, np.float32))],
    )  # fmt: skip
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [value("e", None)]
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["p"]),
        helper.make_node(
            "If", ["p"], ["y"], name="/blk/If", then_branch=then_g, else_branch=else_g
        ),
    ]
    m = model(
        nodes,
        [value("x", ["N"])],
        [value("y", None)],
        initializers=[init("zero", np.array(0.0, np.float32))],
    )
    g = mo.load(m)
    node = g.node("blk/If")
    assert sorted(node.subgraphs) == ["else_branch", "then_branch"]
    assert "Mul" in {n.op_type for n in node.subgraphs["then_branch"].nodes}
    for x in (np.array([1.0, 2.0], np.float32), np.array([-1.0, -2.0, 0.5], np.float32)):
        _close(_run(g, {"x": x}), reference(m, {"x": x}))


def test_loop_is_a_while_over_iteration_condition_and_state():
    """acc = acc * 2 + x, M times. Against ONNX Runtime: onnx's reference evaluator does
    not run a Loop whose condition input is left out."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc_in", "two"], ["a2"]),
            helper.make_node("Add", ["a2", "x"], ["acc_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "body",
        [value("i", [], INT64), value("c_in", [], TensorProto.BOOL), value("acc_in", [2])],
        [value("c_out", [], TensorProto.BOOL), value("acc_out", [2])],
        initializer=[init("two", np.array(2.0, np.float32))],
    )
    nodes = [helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body, name="/loop")]
    m = model(
        nodes, [value("M", [], INT64), value("acc0", [2]), value("x", [2])], [value("acc", None)]
    )
    g = mo.load(m)
    assert g.node("loop/While").op_type == "While"
    for trips in (0, 3):
        feeds = {
            "M": np.array(trips, np.int64),
            "acc0": np.ones(2, np.float32),
            "x": np.array([1.0, -1.0], np.float32),
        }
        _close(_run(g, feeds), ort_run(m, feeds))


def test_unsupported_ops_inside_subgraphs_are_listed_too():
    body = helper.make_graph(
        [helper.make_node("Col2Im", ["x", "x", "x"], ["t"])], "then", [], [value("t", None)]
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [value("e", None)]
    )
    nodes = [helper.make_node("If", ["p"], ["y"], then_branch=body, else_branch=other)]
    m = model(nodes, [value("p", [], TensorProto.BOOL), value("x", [2, 2])], [value("y", None)])
    with pytest.raises(mdsl.GraphError, match=r"unsupported op types: Col2Im \(1: "):
        mo.load(m)


def test_corrupted_bytes_never_crash():
    """Random byte flips in a valid model: every outcome is a graph or an MdslError."""
    rng = np.random.default_rng(0)
    data = _versions_model(13).SerializeToString()
    for _ in range(150):
        corrupted = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            corrupted[int(rng.integers(len(corrupted)))] = int(rng.integers(256))
        with contextlib.suppress(mdsl.MdslError):
            mo.load(bytes(corrupted))


# -- Scan -------------------------------------------------------------------------------------
def _scan_model(x_shape, *, directions=(1,), output_axis=1):
    """Scan over axis 0 of x: the state accumulates each row, every step emits the
    running sum and the row doubled."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s", "row"], ["s_next"]),
            helper.make_node("Identity", ["s_next"], ["sum_out"]),
            helper.make_node("Add", ["row", "row"], ["twice"]),
        ],
        "body",
        [value("s", [3]), value("row", [3])],
        [value("s_next", [3]), value("sum_out", [3]), value("twice", [3])],
    )
    scan = helper.make_node(
        "Scan",
        ["init", "x"],
        ["final", "sums", "twices"],
        body=body,
        num_scan_inputs=1,
        scan_input_directions=list(directions),
        scan_output_directions=[0, 1],
        scan_output_axes=[0, output_axis],
    )
    outputs = [value("final", None), value("sums", None), value("twices", None)]
    return model([scan], [value("init", [3]), value("x", x_shape)], outputs)


def test_scan_unrolls_with_reversed_inputs_and_outputs_and_matches_onnxruntime():
    m = _scan_model([4, 3])
    feeds = {
        "init": np.ones(3, np.float32),
        "x": RNG_SCAN.standard_normal((4, 3)).astype(np.float32),
    }
    g = mo.load(m)
    assert "Scan" not in {n.op_type for n in g.nodes}
    _close(_run(g, feeds), ort_run(m, feeds))
    exe = mdsl.compile(g, backend="c")
    _close(
        list(exe.run({mo.mdsl_name(k): v for k, v in feeds.items()}).values()), ort_run(m, feeds)
    )


def test_scan_over_a_symbolic_length_is_a_clear_error():
    with pytest.raises(mdsl.GraphError, match="one static size"):
        mo.load(_scan_model(["T", 3]))


RNG_SCAN = np.random.default_rng(17)
