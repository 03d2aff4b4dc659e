"""dce: what no output needs goes; inputs and what subgraphs read stay."""

from __future__ import annotations

import mdsl
from mdsl import ops
from tests.passes.checks import assert_preserves_results, op_types


def dce(g):
    return mdsl.passes.run(g, ["dce"])


def test_dead_branches_go_inputs_stay():
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3))
        unused_input = g.input("u", (2,))
        dead = ops.relu(ops.exp(x) + 1.0)
        _ = dead * unused_input.sum()
        g.output(ops.tanh(x), "y")
    g2 = dce(g)
    assert op_types(g2) == ["Input", "Input", "Tanh", "Output"]
    assert (
        g2.pass_log[0].summary == "removed 6 dead node(s)"
    )  # Exp, Const, Add, Relu, ReduceSum, Mul
    assert list(g2.inputs) == ["x", "u"]
    assert_preserves_results(g, g2)


def test_a_live_graph_is_left_alone():
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        g.output(ops.exp(x), "a")
        g.output(x + 1.0, "b")
    g2 = dce(g)
    assert op_types(g2) == op_types(g) and not g2.pass_log[0].changed


def test_multi_output_nodes_stay_when_one_output_is_read():
    with mdsl.Graph("g") as g:
        x = g.input("x", (4,))
        a, _b = ops.split(x, num_outputs=2)
        g.output(a, "a")
    assert op_types(dce(g)) == ["Input", "Split", "Output"]


def test_outer_tensors_read_only_by_a_subgraph_stay_dead_inner_nodes_go(region):
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        only_for_body = ops.exp(x)
        dead_outer = ops.neg(x)  # noqa: F841

        def body(v):
            _ = ops.sigmoid(v)  # dead inside the body
            return v * only_for_body

        g.output(region(g, x, body), "y")
    g2 = dce(g)
    assert op_types(g2) == ["Input", "Exp", "TestRegion", "Output"]
    assert op_types(g2.node("TestRegion").subgraphs["body"]) == ["Mul", "Output"]
    assert g2.pass_log[0].summary == "removed 2 dead node(s)"
    mdsl.ir.verify(g2)


def test_a_dead_region_goes_with_its_subgraph(region):
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        region(g, x, lambda v: v + 1.0)
        g.output(x * 2.0, "y")
    assert op_types(dce(g)) == ["Input", "Const", "Mul", "Output"]
