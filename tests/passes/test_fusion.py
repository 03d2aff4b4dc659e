"""Fusion grouping: the groups of the classic patterns, materialized outputs, the size cap,
and on random DAGs: the group graph is acyclic, every group connected and convex, the
kind rules hold, and results do not change (fusion only annotates)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdsl
from mdsl import ops
from mdsl.passes.fusion import (
    assign_fusion_groups,
    fusion_group_problems,
    fusion_groups,
    node_role,
)
from tests.passes.random_graphs import PROFILE, GraphConfig, random_graphs

STRUCTURAL = ("Input", "Const", "Output")


def fused(g: mdsl.Graph) -> mdsl.Graph:
    return mdsl.passes.run(g, ["fuse"])


def kinds_and_ops(g: mdsl.Graph) -> list[tuple[str, list[str]]]:
    return [(grp.kind, [n.op_type for n in grp.nodes]) for grp in fusion_groups(g)]


def assert_results_unchanged(g, g2, feeds):
    want, got = mdsl.interpret(g, feeds), mdsl.interpret(g2, feeds)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


# -- the patterns the codegen relies on ---------------------------------------------------------
def conv_bn_relu_graph():
    with mdsl.Graph("cbr") as g:
        x = g.input("x", ("N", 3, 8, 8))
        y = ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), pads=1)
        y = ops.batch_norm(
            y,
            mdsl.param("gamma", (4,), init="ones"),
            mdsl.param("beta", (4,)),
            mdsl.param("mean", (4,)),
            mdsl.param("var", (4,), init="ones"),
        )
        g.output(ops.relu(y), "y")
    return g


def test_conv_bn_relu_is_one_group_anchored_at_the_conv():
    g = conv_bn_relu_graph()
    g2 = fused(g)
    [group] = fusion_groups(g2)
    assert group.kind == "extern_epilogue"
    assert [n.op_type for n in group.nodes] == ["Conv", "BatchNormalization", "Relu"]
    assert group.anchor.op_type == "Conv"
    assert [t.name for t in group.inputs] == ["x", "w", "gamma", "beta", "mean", "var"]
    assert [t.name for t in group.outputs] == ["Relu"]
    assert all(n.fusion_group is None for n in g2 if n.op_type in STRUCTURAL)
    assert all(n.fusion_group is None for n in g), "the pass must not touch its argument"
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    assert_results_unchanged(g, g2, {"x": x})


def test_matmul_bias_gelu_is_one_group():
    with mdsl.Graph("ffn") as g:
        x = g.input("x", ("B", 16))
        y = ops.matmul(x, mdsl.param("w", (16, 32))) + mdsl.param("b", (32,))
        g.output(ops.gelu(y, approximate="tanh"), "y")
    g2 = fused(g)
    assert kinds_and_ops(g2) == [("extern_epilogue", ["MatMul", "Add", "Gelu"])]


def test_gelu_written_out_joins_the_gemm_epilogue():
    with mdsl.Graph("ffn") as g:
        x = g.input("x", (4, 8))
        y = ops.matmul(x, mdsl.param("w", (8, 8))) + mdsl.param("b", (8,))
        inner = (y + 0.044715 * y * y * y) * 0.7978845608
        g.output(0.5 * y * (1.0 + ops.tanh(inner)), "y")
    g2 = fused(g)
    [group] = fusion_groups(g2)
    assert group.kind == "extern_epilogue"
    assert group.nodes[0].op_type == "MatMul"
    assert len(group) == len([n for n in g if n.op_type not in STRUCTURAL])
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    assert_results_unchanged(g, g2, {"x": x})


def test_residual_add_joins_the_epilogue_but_nothing_joins_before_the_anchor():
    with mdsl.Graph("res") as g:
        x = g.input("x", (4, 8))
        pre = ops.relu(x)  # feeds the matmul: a prologue, which an extern group never takes
        y = ops.matmul(pre, mdsl.param("w", (8, 8)))
        g.output(ops.relu(y + x), "y")
    assert kinds_and_ops(fused(g)) == [
        ("pointwise", ["Relu"]),
        ("extern_epilogue", ["MatMul", "Add", "Relu"]),
    ]


def test_gemm_with_bias_activation_and_residual_is_one_group():
    with mdsl.Graph("gemm") as g:
        x = g.input("x", ("N", 8))
        y = ops.gemm(x, mdsl.param("w", (8, 8)), mdsl.param("b", (8,)), transB=True)
        g.output(ops.sigmoid(y) + x, "y")
    g2 = fused(g)
    assert kinds_and_ops(g2) == [("extern_epilogue", ["Gemm", "Sigmoid", "Add"])]
    x = np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32)
    assert_results_unchanged(g, g2, {"x": x})


def test_softmax_chain_is_one_reduction_group():
    with mdsl.Graph("softmax") as g:
        x = g.input("x", ("N", 10))
        e = ops.exp(x - ops.reduce_max(x, axes=[-1]))
        g.output(e / ops.reduce_sum(e, axes=[-1]), "y")
    g2 = fused(g)
    assert kinds_and_ops(g2) == [("reduction", ["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"])]
    [group] = fusion_groups(g2)
    assert [t.name for t in group.outputs] == ["Div"]  # exp and the sums stay on chip
    x = np.random.default_rng(2).standard_normal((3, 10)).astype(np.float32)
    assert_results_unchanged(g, g2, {"x": x})


def attention_tail(softmax_axis: int) -> mdsl.Graph:
    with mdsl.Graph("attn") as g:
        s = g.input("s", (2, 4, 4))
        p = ops.softmax(s * 0.125, axis=softmax_axis) * 2.0
        gamma, beta = mdsl.param("g", (4,), init="ones"), mdsl.param("b", (4,))
        g.output(ops.relu(ops.layer_norm(p, gamma, beta, axis=-1)), "y")
    return g


def test_softmax_and_layer_norm_ops_take_their_prologue_and_epilogue():
    assert kinds_and_ops(fused(attention_tail(softmax_axis=1))) == [
        ("reduction", ["Mul", "Softmax", "Mul"]),
        ("reduction", ["LayerNormalization", "Relu"]),
    ]


def test_row_reductions_over_the_same_rows_share_a_kernel():
    g = attention_tail(softmax_axis=-1)  # softmax and layer norm both reduce the last axis
    g2 = fused(g)
    assert kinds_and_ops(g2) == [
        ("reduction", ["Mul", "Softmax", "Mul", "LayerNormalization", "Relu"])
    ]
    s = np.random.default_rng(3).standard_normal((2, 4, 4)).astype(np.float32)
    assert_results_unchanged(g, g2, {"s": s})


def test_layer_norm_chain_is_one_reduction_group():
    with mdsl.Graph("ln") as g:
        x = g.input("x", ("N", 16))
        mean = ops.reduce_mean(x, axes=[-1])
        d = x - mean
        var = ops.reduce_mean(d * d, axes=[-1])
        y = d / ops.sqrt(var + 1e-5)
        g.output(y * mdsl.param("g", (16,), init="ones") + mdsl.param("b", (16,)), "y")
    [group] = fusion_groups(fused(g))
    assert group.kind == "reduction"
    assert [n.op_type for n in group.nodes] == [
        "ReduceMean", "Sub", "Mul", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add",
    ]  # fmt: skip
    assert group.anchor.op_type == "ReduceMean"


def test_reductions_over_different_axes_are_separate_kernels():
    with mdsl.Graph("two_axes") as g:
        x = g.input("x", (4, 6))
        rows = ops.reduce_sum(x, axes=[1])
        cols = ops.reduce_sum(x, axes=[0])
        g.output(x - rows, "a")
        g.output(x * cols, "b")
    groups = kinds_and_ops(fused(g))
    assert sorted(groups) == [
        ("reduction", ["ReduceSum", "Mul"]),
        ("reduction", ["ReduceSum", "Sub"]),
    ]


# -- materialization and the prologue rule ------------------------------------------------------
def test_a_tensor_read_outside_its_group_is_materialized():
    with mdsl.Graph("shared") as g:
        x = g.input("x", (4, 8))
        y = ops.matmul(x, mdsl.param("w", (8, 8)))
        act = ops.relu(y + 1.0)
        g.output(act * 2.0, "a")
        g.output(ops.transpose(act), "t")  # data movement: its own kernel, reads act
        g.output(y, "raw")  # the GEMM result itself is an output too
    g2 = fused(g)
    groups = fusion_groups(g2)
    assert [(grp.kind, len(grp)) for grp in groups] == [("extern_epilogue", 4), ("opaque", 1)]
    gemm = groups[0]
    assert [t.name for t in gemm.outputs] == ["MatMul", "Relu", "Mul"]


def test_a_prologue_with_other_readers_is_not_pulled_into_a_reduction():
    with mdsl.Graph("prologue") as g:
        x = g.input("x", (4, 8))
        sq = x * x
        g.output(ops.reduce_sum(sq, axes=[-1]), "s")
        g.output(ops.transpose(sq), "t")  # sq is needed outside any reduction group
    assert kinds_and_ops(fused(g)) == [
        ("pointwise", ["Mul"]),
        ("reduction", ["ReduceSum"]),
        ("opaque", ["Transpose"]),
    ]


def test_a_prologue_read_only_inside_joins_the_reduction():
    with mdsl.Graph("rms") as g:
        x = g.input("x", (4, 8))
        rms = ops.sqrt(ops.reduce_mean(x * x, axes=[-1]) + 1e-6)
        g.output(x / rms, "y")
    assert kinds_and_ops(fused(g)) == [("reduction", ["Mul", "ReduceMean", "Add", "Sqrt", "Div"])]


def test_pointwise_ops_of_different_shapes_stay_apart():
    with mdsl.Graph("bcast") as g:
        small = g.input("small", (8,))
        big = g.input("big", (4, 8))
        g.output(ops.exp(small) + big, "y")
    assert kinds_and_ops(fused(g)) == [("pointwise", ["Exp"]), ("pointwise", ["Add"])]


def test_the_size_cap_splits_long_chains():
    with mdsl.Graph("chain") as g:
        y = g.input("x", (4,))
        for _ in range(10):
            y = ops.tanh(y)
        g.output(y, "y")
    g2 = mdsl.ir.rewrite.clone_graph(g)
    assert assign_fusion_groups(g2, max_group_size=4) == 3
    assert [len(grp) for grp in fusion_groups(g2)] == [4, 4, 2]
    assert len(fusion_groups(fused(g))) == 1


def test_refusing_does_not_depend_on_names_and_a_rerun_changes_nothing():
    g2 = fused(conv_bn_relu_graph())
    g3 = mdsl.passes.run(g2, ["fuse"])
    assert g3.pass_log[-1].changed is False
    assert [n.fusion_group for n in g3] == [n.fusion_group for n in g2]


def test_groups_survive_serialization():
    g2 = fused(conv_bn_relu_graph())
    g3 = mdsl.Graph.from_json(g2.to_json())
    assert kinds_and_ops(g3) == kinds_and_ops(g2)


def test_problems_are_reported_for_hand_made_bad_groups():
    g = mdsl.ir.rewrite.clone_graph(conv_bn_relu_graph())
    for node in g:
        node.fusion_group = None if node.op_type in STRUCTURAL else "fg0"
    g.node("Conv").fusion_group = "fg1"  # the BN/Relu group now has no anchor before it...
    g.node("Relu").fusion_group = "fg1"  # ...and fg0 <-> fg1 depend on each other
    problems = fusion_group_problems(g)
    assert any("cycle" in p for p in problems)


def test_an_extern_group_never_takes_a_second_anchor():
    with mdsl.Graph("two") as g:
        x = g.input("x", (4, 8))
        a = ops.matmul(x, mdsl.param("w1", (8, 8)))
        b = ops.matmul(x, mdsl.param("w2", (8, 8)))
        g.output(a + b, "y")
    assert kinds_and_ops(fused(g)) == [
        ("extern_epilogue", ["MatMul", "Add"]),
        ("extern_epilogue", ["MatMul"]),
    ]


# -- random DAGs ----------------------------------------------------------------------------------
ROWS, COLS = 3, 4


@st.composite
def random_dags(draw):
    """A random DAG over (ROWS, COLS) tensors: pointwise, reductions (keepdims, so results
    broadcast back), matmuls and a data-movement op, with operands drawn from every
    earlier tensor, so diamonds, shared producers and long-range edges are common."""
    with mdsl.Graph("dag") as g:
        pool = [g.input("x", (ROWS, COLS))]
        full = [pool[0]]  # tensors of shape (ROWS, COLS)
        for step in range(draw(st.integers(2, 18))):
            a = full[draw(st.integers(0, len(full) - 1))]
            b = pool[draw(st.integers(0, len(pool) - 1))]
            kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "matmul", "move"]))
            if kind == "unary":
                out = ops.tanh(a) if draw(st.booleans()) else ops.relu(a)
            elif kind == "binary":
                out = a + b if draw(st.booleans()) else a * b
            elif kind == "reduce":
                op = ops.reduce_sum if draw(st.booleans()) else ops.reduce_max
                out = op(a, axes=[-1])
            elif kind == "matmul":
                w = np.random.default_rng(step).uniform(-0.5, 0.5, (COLS, COLS))
                out = ops.matmul(a, g.const("w", w.astype(np.float32)))
            else:
                out = ops.neg(ops.reshape(ops.reshape(a, shape=(-1,)), shape=(ROWS, COLS)))
            pool.append(out)
            if out.shape == (ROWS, COLS):
                full.append(out)
        used = {t for n in g for t in n.inputs if t is not None}
        for i, t in enumerate(t for t in pool if t not in used or t is pool[-1]):
            g.output(t, f"y{i}")
    return g, draw(st.sampled_from([3, 5, 32]))


def groups_of(g: mdsl.Graph) -> dict[str, list[mdsl.Node]]:
    by_id: dict[str, list[mdsl.Node]] = {}
    for node in g:
        if node.fusion_group is not None:
            by_id.setdefault(node.fusion_group, []).append(node)
    return by_id


def group_edges(g: mdsl.Graph) -> set[tuple[str, str]]:
    return {
        (t.producer.fusion_group, n.fusion_group)
        for n in g
        for t in n.inputs
        if t is not None
        and t.producer.fusion_group is not None
        and n.fusion_group is not None
        and t.producer.fusion_group != n.fusion_group
    }


def assert_acyclic(nodes: set[str], edges: set[tuple[str, str]]) -> None:
    """Kahn's algorithm: every group can be scheduled after all the groups it reads."""
    indegree = dict.fromkeys(nodes, 0)
    for _, dst in edges:
        indegree[dst] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    scheduled = 0
    while ready:
        src = ready.pop()
        scheduled += 1
        for a, dst in edges:
            if a == src:
                indegree[dst] -= 1
                if indegree[dst] == 0:
                    ready.append(dst)
    assert scheduled == len(nodes), "the group graph has a cycle"


def consumers(g: mdsl.Graph) -> dict:
    out: dict = {}
    for n in g:
        for t in n.inputs:
            if t is not None:
                out.setdefault(t.producer, []).append(n)
    return out


def assert_connected(members: list[mdsl.Node]) -> None:
    inside = set(members)
    neighbours = {n: set() for n in members}
    for n in members:
        for t in n.inputs:
            if t is not None and t.producer in inside:
                neighbours[n].add(t.producer)
                neighbours[t.producer].add(n)
    seen, todo = {members[0]}, [members[0]]
    while todo:
        for m in neighbours[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    assert seen == inside, f"group {members[0].fusion_group} is not connected"


def assert_convex(members: list[mdsl.Node], readers: dict) -> None:
    """No path leaves the group and comes back into it."""
    inside = set(members)
    todo = [c for m in members for c in readers.get(m, []) if c not in inside]
    seen = set(todo)
    while todo:
        node = todo.pop()
        for c in readers.get(node, []):
            assert c not in inside, f"group {members[0].fusion_group} is not convex"
            if c not in seen:
                seen.add(c)
                todo.append(c)


def assert_kind_rules(members: list[mdsl.Node], cap: int) -> None:
    roles = [node_role(n) for n in members]
    assert len(members) <= cap
    assert roles.count("extern") <= 1
    if "extern" in roles:
        assert roles[0] == "extern", "only ops after the anchor join it"
        assert "reduction" not in roles
    if len(members) > 1:
        assert set(roles) <= {"pointwise", "reduction", "extern"}


@settings(PROFILE, max_examples=150)
@given(random_dags())
def test_random_dags_get_legal_acyclic_convex_groups(case):
    g, cap = case
    g2 = mdsl.ir.rewrite.clone_graph(g)
    assign_fusion_groups(g2, max_group_size=cap)
    for node in g2:
        assert (node.fusion_group is None) == (node.op_type in STRUCTURAL)
    groups = groups_of(g2)
    assert_acyclic(set(groups), group_edges(g2))
    readers = consumers(g2)
    for members in groups.values():
        assert_connected(members)
        assert_convex(members, readers)
        assert_kind_rules(members, cap)
    assert fusion_group_problems(g2) == []
    x = np.random.default_rng(0).uniform(-1, 1, (ROWS, COLS)).astype(np.float32)
    assert_results_unchanged(g, g2, {"x": x})


@settings(PROFILE, max_examples=60)
@given(random_graphs(GraphConfig(max_steps=14)))
def test_optimized_random_model_graphs_get_legal_groups(rg):
    g = mdsl.optimize(rg.graph, level=3)  # layout and fusion run last, after every rewrite
    groups = groups_of(g)
    assert_acyclic(set(groups), group_edges(g))
    readers = consumers(g)
    for members in groups.values():
        assert_connected(members)
        assert_convex(members, readers)
        assert_kind_rules(members, 32)
    assert fusion_group_problems(g) == []


def test_no_group_spans_a_path_through_another_kernel():
    """tanh reaches the Add directly and through two Transposes (their own kernels):
    one group {Tanh, Add} would have to run both before and after them."""
    with mdsl.Graph("trap") as g:
        x = g.input("x", (ROWS, COLS))
        a = ops.tanh(x)
        c = ops.transpose(ops.transpose(a))  # opaque, between a and d
        d = a + c
        g.output(d, "y")
    g2 = fused(g)
    assert_acyclic(set(groups_of(g2)), group_edges(g2))
    assert kinds_and_ops(g2) == [
        ("pointwise", ["Tanh"]),
        ("opaque", ["Transpose"]),
        ("opaque", ["Transpose"]),
        ("pointwise", ["Add"]),
    ]


@pytest.mark.parametrize("cap", [1, 2])
def test_tiny_caps_still_give_every_node_a_group(cap):
    g2 = mdsl.ir.rewrite.clone_graph(conv_bn_relu_graph())
    count = assign_fusion_groups(g2, max_group_size=cap)
    assert count == (3 if cap == 1 else 2)
