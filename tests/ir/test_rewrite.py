"""Graph surgery helpers: clone, rewire, remove, insert, prune, topological order."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ir.rewrite import (
    all_graphs,
    attr_key,
    attrs_equal,
    clone_graph,
    insert_nodes,
    is_topological,
    new_node,
    prune_dead,
    remove_nodes,
    replace_all_uses,
    toposort,
    use_map,
)
from tests.op_sandbox import restored_registries


def region_graph():
    """x -> Exp -> TestRegion(body: v * exp_outer + 1) -> Output; with a layer."""

    @mdsl.op_proto("TestRegion", inputs={"x": "any"}, outputs={"y": "any"})
    def region(x):
        return x

    @mdsl.layer
    def head(x):
        return ops.exp(x)

    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3))
        e = head(x)
        body = mdsl.Graph("body")
        body.parent = g
        with body:
            body.output(x * e + 1.0, "out")
        y = region(x)
        y.producer.subgraphs = {"body": body}
        g.output(y, "y")
        g.pass_log.append("built")
    return g


def test_clone_is_deep_structurally_and_shares_constant_arrays():
    with restored_registries():
        g = region_graph()
        c = clone_graph(g)
        mdsl.ir.verify(c)
        assert [n.name for n in c] == [n.name for n in g]
        assert not {id(n) for n in c} & {id(n) for n in g}
        for a, b in zip(c, g):
            assert a.graph is c and a.attrs == b.attrs and a.attrs is not b.attrs
            assert all(t.producer is a for t in a.outputs)
        body_c, body_g = (
            c.node("TestRegion").subgraphs["body"],
            g.node("TestRegion").subgraphs["body"],
        )
        assert body_c is not body_g and body_c.parent is c
        # the closure reads of the body now point at the clone's tensors
        mul = body_c.node("Mul")
        assert mul.inputs[0] is c.inputs["x"] and mul.inputs[1] is c.node("head/Exp").output
        const_c, const_g = body_c.node("Const"), body_g.node("Const")
        assert const_c.attrs["value"] is const_g.attrs["value"]
        assert set(c.layers) == {"head"} and c.layers["head"].node_names == ["head/Exp"]
        assert c.layers["head"] is not g.layers["head"]
        assert c.pass_log == ["built"] and c.pass_log is not g.pass_log
        c.pass_log.append("more")
        assert g.pass_log == ["built"]


def test_clone_keeps_parameters_lazy_and_runs_the_same():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2, 4))
        g.output(x @ mdsl.param("w", (4, 3)), "y")
    c = clone_graph(g, name="copy")
    assert c.name == "copy"
    assert type(c.node("w").attrs["value"]).__name__ == "ParamInit"
    feeds = {"x": np.ones((2, 4), np.float32)}
    np.testing.assert_array_equal(mdsl.interpret(c, feeds)["y"], mdsl.interpret(g, feeds)["y"])


def test_replace_all_uses_reaches_into_subgraphs_and_checks_types():
    with restored_registries():
        g = region_graph()
        x, e = g.inputs["x"], g.node("head/Exp").output
        assert replace_all_uses(g, e, x) == 1
        assert g.node("TestRegion").subgraphs["body"].node("Mul").inputs == [x, x]
        assert g.consumers(x)  # caches were invalidated
        with pytest.raises(mdsl.GraphError, match="types differ"):
            replace_all_uses(g, x, g.node("TestRegion").subgraphs["body"].node("Const").output)


def test_use_map_counts_subgraph_reads():
    with restored_registries():
        g = region_graph()
        uses = use_map(g)
        x = g.inputs["x"]
        assert sorted(n.op_type for n, _ in uses[x]) == ["Exp", "Mul", "TestRegion"]
        assert [g_.name for g_ in all_graphs(g)] == ["g", "body"]


def test_prune_dead_follows_inputs_and_keeps_closure_reads():
    with restored_registries():
        g = region_graph()
        with g:
            dead = ops.relu(ops.neg(g.inputs["x"]))  # noqa: F841
        assert prune_dead(g) == 2
        assert [n.op_type for n in g] == ["Input", "Exp", "TestRegion", "Output"]


def test_remove_nodes_refuses_to_orphan_readers():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,))
        g.output(ops.exp(ops.neg(x)), "y")
    with pytest.raises(mdsl.GraphError, match="cannot remove Neg: Exp still reads Neg"):
        remove_nodes(g, [g.node("Neg")])
    assert remove_nodes(g, [g.node("Neg"), g.node("Exp"), g.node("Output_y")]) == 3
    assert [n.name for n in g] == ["x"]


def test_insert_nodes_keeps_topological_order_and_layers():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,))
        g.output(ops.exp(x), "y")
    exp = g.node("Exp")
    neg = new_node(g, "Neg", [x], {}, [x.type], like=exp)
    insert_nodes(g, [neg], before=exp)
    exp.inputs[0] = neg.output
    assert [n.op_type for n in g] == ["Input", "Neg", "Exp", "Output"]
    assert neg.name == "Neg" and neg.source == exp.source
    late = new_node(g, "Relu", [neg.output], {}, [x.type], name="late")
    insert_nodes(g, [late], before=neg)  # too early for its input: re-sorted
    assert is_topological(g)
    assert [n.name for n in g].index("late") > [n.name for n in g].index("Neg")
    mdsl.ir.verify(g)


def test_toposort_is_stable_and_detects_cycles():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,))
        a = ops.exp(x)
        b = ops.neg(x)
        g.output(a + b, "y")
    names = [n.name for n in g]
    g.replace_nodes([g.node("Add"), *[n for n in g if n.name != "Add"]])
    assert not is_topological(g)
    toposort(g)
    assert [n.name for n in g] == ["x", "Exp", "Neg", "Add", "Output_y"] == names
    g.node("Exp").inputs[0] = g.node("Add").output
    with pytest.raises(mdsl.GraphError, match="has a cycle through"):
        toposort(g)


def test_attr_keys():
    assert attr_key((1, 2)) == attr_key([1, 2])
    assert attr_key(1) != attr_key(1.0) != attr_key(True)
    assert attr_key(float("nan")) == attr_key(float("nan"))
    assert attrs_equal(np.array([1.0, np.nan]), np.array([1.0, np.nan]))
    assert not attrs_equal(np.array([1, 2]), np.array([1.0, 2.0]))
    assert not attrs_equal(np.array([1]), (1,))
    assert attr_key({"a": (1,), "b": mdsl.float32}) == attr_key({"b": mdsl.float32, "a": [1]})
