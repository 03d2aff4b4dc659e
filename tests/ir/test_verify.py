"""`mdsl.ir.verify`: every broken invariant is found and named with its node and line."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ir.graph import Node, Tensor
from mdsl.ir.tensor_type import TensorType
from tests.user_lines import line_of


def build_chain() -> mdsl.Graph:
    with mdsl.Graph("chain") as g:
        x = g.input("x", (2, 3))
        a = ops.relu(x)  # <- relu-line
        b = ops.exp(a)  # <- exp-line
        c = ops.tanh(b)
        g.output(c, "y")
    return g


def where(g: mdsl.Graph, name: str) -> str:
    node = g.node(name)
    return f"{node.name} ({node.op_type}) at {node.source}"


def test_a_built_graph_verifies():
    mdsl.ir.verify(build_chain())


def test_cycle_made_by_hand_editing_inputs():
    g = build_chain()
    relu, tanh = g.node("Relu"), g.node("Tanh")
    relu.inputs[0] = tanh.output  # Relu now reads Tanh, which reads Exp, which reads Relu
    with pytest.raises(mdsl.GraphError) as e:
        mdsl.ir.verify(g)
    message = str(e.value)
    assert "\n" not in message
    assert message == (
        f"graph 'chain' is invalid: {where(g, 'Relu')}: input 0 (Tanh) appears later "
        "(cycle or wrong order)"
    )
    assert relu.source.endswith(f":{line_of(__file__, 'relu-line')}")


def test_self_loop():
    g = build_chain()
    exp = g.node("Exp")
    exp.inputs[0] = exp.output
    with pytest.raises(mdsl.GraphError, match=r"Exp \(Exp\) at .*: input 0 \(Exp\) appears later"):
        mdsl.ir.verify(g)


def test_input_from_another_graph():
    g, other = build_chain(), build_chain()
    g.node("Exp").inputs[0] = other.node("Relu").output
    with pytest.raises(mdsl.GraphError, match=r"input 0 \(Relu\) is not in this graph"):
        mdsl.ir.verify(g)


def test_type_that_disagrees_with_inference():
    g = build_chain()
    exp = g.node("Exp")
    exp.outputs[0].type = TensorType((2, 4), "float32")
    with pytest.raises(mdsl.GraphError) as e:
        mdsl.ir.verify(g)
    # Tanh now also disagrees (it infers from the wrong Exp type): two problems, listed
    lines = str(e.value).splitlines()
    assert lines[0] == "graph 'chain' is invalid:"
    assert lines[1] == (
        f"  {where(g, 'Exp')}: output 0 is float32[2,4], its op infers float32[2,3]"
    )
    assert lines[2].startswith(f"  {where(g, 'Tanh')}: output 0 is float32[2,3]")
    mdsl.ir.verify(g, check_types=False)  # structure alone is fine


def test_mistyped_attr_found_by_the_verifier():
    with mdsl.Graph() as g:
        y = ops.reshape(g.input("x", (2, 3)), shape=(6,))
        g.output(y, "y")
    g.node("Reshape").attrs["shape"] = "six"
    with pytest.raises(mdsl.GraphError, match=r"attr 'shape' expects list\[int\], got 'six'"):
        mdsl.ir.verify(g)
    g.node("Reshape").attrs = {"shape": (6,), "allowzero": False, "extra": 1}
    with pytest.raises(mdsl.GraphError, match="unknown attr extra"):
        mdsl.ir.verify(g)


def test_unknown_op_type():
    g = build_chain()
    g.node("Exp").op_type = "Frobnicate"
    with pytest.raises(
        mdsl.GraphError, match=r"Exp \(Frobnicate\) at .*unknown op type 'Frobnicate'"
    ):
        mdsl.ir.verify(g)


def test_duplicate_names_and_bad_wiring():
    g = build_chain()
    exp, tanh = g.node("Exp"), g.node("Tanh")
    tanh.name = "Exp"
    exp.outputs[0].index = 1
    with pytest.raises(mdsl.GraphError) as e:
        mdsl.ir.verify(g)
    text = str(e.value)
    assert "Exp (Exp) at" in text and "output 0 is not wired to its producer" in text
    assert "Exp (Tanh) at" in text and "duplicate node name" in text


def test_node_of_another_graph():
    g, other = build_chain(), build_chain()
    g.node("Exp").graph = other
    with pytest.raises(mdsl.GraphError, match="node's graph is not 'chain'"):
        mdsl.ir.verify(g)


def test_structural_nodes():
    g = build_chain()
    g.node("Output_y").attrs["name"] = "z"
    with pytest.raises(mdsl.GraphError, match="Output node must be named Output_<name>"):
        mdsl.ir.verify(g)
    g = build_chain()
    x = g.node("x")
    x.inputs.append(g.node("Relu").output)
    with pytest.raises(mdsl.GraphError, match="an Input node has no inputs and one output"):
        mdsl.ir.verify(g)


def test_const_value_must_match_its_type():
    with mdsl.Graph() as g:
        c = g.const("c", np.zeros((2, 2), np.float32))
        g.output(c, "y")
    g.node("c").attrs["value"] = np.zeros((3,), np.float32)
    with pytest.raises(mdsl.GraphError, match=r"value is float32\[3\], type says float32\[2,2\]"):
        mdsl.ir.verify(g)
    g.node("c").attrs["value"] = [1, 2]
    with pytest.raises(mdsl.GraphError, match="a Const node holds an ndarray value"):
        mdsl.ir.verify(g)


def test_storage_format_must_fit_the_shape():
    with mdsl.Graph() as g2:
        y = ops.relu(g2.input("x", (5,)))
        g2.output(y, "y")
    y.type = y.type.with_storage("FRACTAL_NZ")
    with pytest.raises(mdsl.GraphError, match="storage format FRACTAL_NZ: FRACTAL_NZ needs rank"):
        mdsl.ir.verify(g2)


def test_many_problems_are_capped():
    with mdsl.Graph("wide") as g:
        x = g.input("x", (2,))
        outs = [ops.relu(x) for _ in range(15)]
        g.output(outs[-1], "y")
    for node in g.nodes:
        if node.op_type == "Relu":
            node.outputs[0].type = TensorType((3,), "float32")
    with pytest.raises(mdsl.GraphError) as e:
        mdsl.ir.verify(g)
    lines = str(e.value).splitlines()
    assert len(lines) == 1 + 10 + 1
    assert lines[-1] == "  ... and 5 more"


def test_hand_built_node_appended_in_order():
    g = build_chain()
    relu = g.node("Relu")
    node = Node("Extra", "Neg", [relu.output], {}, source="model.py:7")
    node.outputs = [Tensor(relu.output.type, node, 0)]
    g.append(node)
    mdsl.ir.verify(g)
    with pytest.raises(mdsl.GraphError, match="a node named 'Extra' already exists"):
        g.append(node)
    node.outputs[0].type = TensorType((9,), "float32")
    with pytest.raises(
        mdsl.GraphError, match=r"^graph 'chain' is invalid: Extra \(Neg\) at model\.py:7: output 0"
    ):
        mdsl.ir.verify(g)


def test_replace_nodes_reindexes_names_and_layers():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with mdsl.scope("S"):
            a = ops.relu(x)
            b = ops.exp(a)
        g.output(b, "y")
    nodes = g.nodes
    g.replace_nodes(nodes)
    assert [n.name for n in g.nodes] == ["x", "S/Relu", "S/Exp", "Output_y"]
    assert g.layers["S"].node_names == ["S/Relu", "S/Exp"]
    mdsl.ir.verify(g)
    g.replace_nodes(nodes[:1] + nodes[2:])  # drop Relu: Exp's input is dangling
    with pytest.raises(mdsl.GraphError, match=r"input 0 \(S/Relu\) is not in this graph"):
        mdsl.ir.verify(g)
