"""Graph queries (`g.nodes`, `g.node`, `g.inputs`, `g.outputs`, `g.layers`, `g.summary()`),
constants, and the Tensor/Node records."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.user_lines import assert_points_at


@mdsl.layer
def dense(x, n):
    w = mdsl.param("w", (x.shape[-1], n))
    b = mdsl.param("b", (n,), init="zeros")
    return ops.relu(x @ w + b)


def build_mlp() -> mdsl.Graph:
    with mdsl.Graph("mlp") as g:
        x = g.input("x", ("N", 4))  # <- x-line
        mask = g.input("mask", ("N", 1), "bool")
        h = dense(dense(x, 8), 2)
        g.output(h, "logits")
        g.output(mask, "mask_out")  # <- mask-out-line
    return g


def test_nodes_are_topological_and_a_copy():
    g = build_mlp()
    names = [n.name for n in g.nodes]
    assert names == [
        "x",
        "mask",
        "dense/w",
        "dense/b",
        "dense/MatMul",
        "dense/Add",
        "dense/Relu",
        "dense_1/w",
        "dense_1/b",
        "dense_1/MatMul",
        "dense_1/Add",
        "dense_1/Relu",
        "Output_logits",
        "Output_mask_out",
    ]
    position = {n: i for i, n in enumerate(names)}
    for node in g.nodes:
        for t in node.inputs:
            assert position[t.producer.name] < position[node.name]
    g.nodes.clear()
    assert len(g.nodes) == len(names) == len(g) and [n.name for n in g] == names


def test_node_lookup():
    g = build_mlp()
    node = g.node("dense_1/MatMul")
    assert node.op_type == "MatMul" and node.graph is g
    assert [t.name for t in node.inputs] == ["dense/Relu", "dense_1/w"]
    assert node.output.shape[1] == 2
    assert g.has_node("dense/b") and not g.has_node("dense/c")
    with pytest.raises(mdsl.GraphError, match="has no node 'MatMul'; did you mean dense/MatMul"):
        g.node("MatMul")
    with pytest.raises(mdsl.GraphError, match=r"graph 'mlp' has no node 'zzz'$"):
        g.node("zzz")


def test_inputs_and_outputs_in_declaration_order():
    g = build_mlp()
    assert list(g.inputs) == ["x", "mask"]
    x = g.inputs["x"]
    assert x.shape == (mdsl.Dim("N"), 4) and x.dtype is mdsl.float32 and x.format is mdsl.ND
    assert g.inputs["mask"].dtype is mdsl.bool_
    assert list(g.outputs) == ["logits", "mask_out"]
    assert g.outputs["logits"] is g.node("dense_1/Relu").output
    assert g.outputs["mask_out"] is g.inputs["mask"]
    assert [n.name for n in g.output_nodes] == ["Output_logits", "Output_mask_out"]
    assert g.node("Output_logits").attrs == {"name": "logits"}
    assert g.node("Output_logits").outputs == []


def test_layers_of_the_graph():
    g = build_mlp()
    assert list(g.layers) == ["dense", "dense_1"]
    assert g.layers["dense"].node_names == [
        "dense/w",
        "dense/b",
        "dense/MatMul",
        "dense/Add",
        "dense/Relu",
    ]
    assert isinstance(g.layers["dense"], mdsl.Layer)


def test_sources():
    g = build_mlp()
    assert_points_at(g.node("x").source, __file__, "x-line")
    assert_points_at(g.node("Output_mask_out").source, __file__, "mask-out-line")


def test_consumers():
    g = build_mlp()
    relu = g.node("dense/Relu").output
    assert [(n.name, i) for n, i in g.consumers(relu)] == [("dense_1/MatMul", 0)]
    mask = g.inputs["mask"]
    assert [(n.name, i) for n, i in g.consumers(mask)] == [("Output_mask_out", 0)]
    assert g.consumers(g.node("Output_logits").inputs[0]) == [(g.node("Output_logits"), 0)]


def test_parameter_count():
    g = build_mlp()
    assert g.parameter_count() == (4 * 8 + 8 + 8 * 2 + 2, (4 * 8 + 8 + 8 * 2 + 2) * 4)


def test_summary_lists_inputs_outputs_ops_layers_and_parameters():
    g = build_mlp()
    text = g.summary()
    lines = text.splitlines()
    assert lines[0] == "Graph 'mlp': 14 nodes, 58 parameters (232 B)"

    def rows(title):
        start = next(i for i, line in enumerate(lines) if line.split()[:1] == title.split()[:1])
        out = []
        for line in lines[start + 2 :]:
            if not line.strip():
                break
            out.append(line.split(None, 1)[0] if title == "names" else line.split())
        return out

    assert [r[:2] for r in rows("inputs")] == [["x", "float32[N,4]"], ["mask", "bool[N,1]"]]
    assert [r[:2] for r in rows("outputs")] == [
        ["logits", "float32[N,2]"],
        ["mask_out", "bool[N,1]"],
    ]
    assert sorted(map(tuple, rows("op"))) == [("Add", "2"), ("MatMul", "2"), ("Relu", "2")]
    assert sorted(map(tuple, rows("top-level"))) == [
        ("(top", "level)", "2"),
        ("dense", "5"),
        ("dense_1", "5"),
    ]


def test_summary_of_a_large_parameter_count_uses_bigger_units():
    with mdsl.Graph("big") as g:
        w = mdsl.param("w", (1024, 1024))
        g.output(w, "w")
    assert g.summary().splitlines()[0] == "Graph 'big': 2 nodes, 1,048,576 parameters (4.0 MiB)"
    assert g.node("w").attrs["value"].__class__.__name__ == "ParamInit", "drawn lazily"


def test_const_copies_and_freezes_its_value():
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    with mdsl.Graph() as g:
        c = g.const("table", data)
        f = g.const("half", 0.5)
        d = g.const("double", np.float64(0.25))
        g.output(c, "c")
        g.output(f, "f")
        g.output(d, "d")
    data[0, 0] = 99
    value = g.node("table").const_value()
    assert value[0, 0] == 0 and not value.flags.writeable
    assert c.shape == (2, 3) and c.dtype is mdsl.int32
    assert f.dtype is mdsl.float32 and f.shape == ()  # Python floats become float32
    assert d.dtype is mdsl.float64  # numpy scalars keep their dtype
    with pytest.raises(mdsl.GraphError, match=r"node Output_c \(Output\) is not a constant"):
        g.node("Output_c").const_value()


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (np.array([1j]), mdsl.DTypeError, "numpy dtype complex128 has no mdsl equivalent"),
        ({"a": 1}, mdsl.DTypeError, "numpy dtype object has no mdsl equivalent"),
        ([[1, 2], [3]], mdsl.GraphError, "cannot make an array of [[1, 2], [3]]"),
    ],
)
def test_const_of_an_unsupported_value(value, error, message):
    with mdsl.Graph() as g:
        with pytest.raises(error) as e:
            g.const("c", value)  # <- bad-const
        g.output(g.input("x", (1,)), "y")
    assert message in e.value.message
    assert (e.value.node, e.value.op_type) == ("c", "Const")
    assert_points_at(e.value.source, __file__, "bad-const")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            np.ones(3, np.float32),
            "c",
            "got ndarray (arguments swapped? it is g.const(name, value))",
        ),
        (3, np.ones(3, np.float32), "constant name must be a non-empty string, got int"),
        ("", 1.0, "constant name must be a non-empty string, got str"),
    ],
)
def test_const_with_a_name_that_is_not_a_string(name, value, message):
    with mdsl.Graph() as g:
        with pytest.raises(mdsl.GraphError) as e:
            g.const(name, value)  # <- bad-name
        g.output(g.input("x", (1,)), "y")
    assert message in str(e.value)
    assert_points_at(e.value.source, __file__, "bad-name")


def test_an_error_names_a_node_given_as_any_object_by_its_text():
    assert str(mdsl.GraphError("broken", node=np.int64(3))) == "3: broken"


def test_tensor_and_node_records():
    g = build_mlp()
    t = g.node("dense/Add").output
    assert t.name == "dense/Add" and t.index == 0 and t.ndim == 2 and t.graph is g
    assert t.producer is g.node("dense/Add")
    assert repr(t) == "Tensor('dense/Add', float32[N,8])"
    assert repr(g.node("dense/Add")) == "Node('dense/Add', Add, inputs=[dense/MatMul, dense/b])"
    assert repr(g) == "Graph('mlp', 14 nodes)"
    with pytest.raises(mdsl.GraphError, match="has 0 outputs"):
        g.node("Output_logits").output


@pytest.mark.parametrize("bad", ["", None, 3])
def test_bad_graph_names(bad):
    with pytest.raises(mdsl.GraphError, match="graph name must be a non-empty string"):
        mdsl.Graph(bad)


def test_two_graphs_can_be_built_interleaved_in_threads():
    import threading

    results = {}
    barrier = threading.Barrier(2)

    def build(tag):
        with mdsl.Graph(tag) as g:
            x = g.input("x", (2,))
            barrier.wait()
            with mdsl.scope(tag):
                y = ops.relu(x)
            barrier.wait()
            g.output(y, "y")
        results[tag] = [n.name for n in g.nodes]

    threads = [threading.Thread(target=build, args=(t,)) for t in ("A", "B")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == {
        "A": ["x", "A/Relu", "Output_y"],
        "B": ["x", "B/Relu", "Output_y"],
    }
