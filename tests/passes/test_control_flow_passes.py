"""Passes over control flow: constant selectors inline the taken branch, loop invariants
leave While bodies, unneeded outputs, loop vars and captures go; the general passes work
inside subgraphs; and every level of `mdsl.optimize` preserves the results of random
graphs with cond and while_loop (derandomized hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import mdsl
from mdsl import ops
from mdsl.ir import context
from mdsl.ir.rewrite import all_graphs
from mdsl.ops.control_flow import control_flow, subgraph_params, subgraph_results
from mdsl.passes.manager import count_nodes
from tests.op_sandbox import restored_registries
from tests.passes.checks import assert_preserves_results, op_types
from tests.passes.random_graphs import PROFILE, assert_same_outputs


def run(g, *names):
    return mdsl.passes.run(g, list(names))


def names(g) -> list[str]:
    return [n.name for n in g]


def feeds_for(n: int = 3) -> dict:
    rng = np.random.default_rng(1)
    return {
        "x": rng.uniform(-2, 2, size=(3, 4)).astype(np.float32),
        "n": np.int64(n),
    }


def assert_same_on(before, after, feeds):
    assert_same_outputs(mdsl.interpret(after, feeds), mdsl.interpret(before, feeds))


# -- fold_control_flow -----------------------------------------------------------------------------
def build_constant_cond(flag: bool) -> mdsl.Graph:
    with mdsl.Graph("const_cond") as g:
        x = g.input("x", ("N", 4))
        pred = g.const("flag", np.array(flag))
        y = mdsl.cond(pred, lambda: ops.relu(x) * 2.0, lambda: ops.exp(x), name="pick")
        g.output(y + 1.0, "y")
    return g


def test_an_if_with_a_constant_predicate_becomes_its_taken_branch():
    taken = {True: ["pick/then/Relu", "pick/then/Const", "pick/then/Mul"], False: ["pick/else/Exp"]}
    for flag, body in taken.items():
        g = build_constant_cond(flag)
        g2 = run(g, "fold_control_flow", "dce")
        assert names(g2) == ["x", *body, "Const", "Add", "Output_y"]
        assert g2.pass_log[0].summary == "decided 1 control-flow node(s), sank 0 constant(s)"
        assert "pick/then" in g2.layers or not flag
        assert_preserves_results(g, g2)


def test_a_predicate_computed_from_constants_folds_at_level_one():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        limit = g.const("limit", np.float32(3.0))
        y = mdsl.cond(limit > 1.0, lambda: x * 2.0, lambda: x * 3.0)
        g.output(y, "y")
    g1 = mdsl.optimize(g, level=1)
    assert op_types(g1) == ["Input", "Const", "Mul", "Output"]
    assert g1.node("cond/then/Const").const_value() == np.float32(2.0)
    assert_preserves_results(g, g1)


def test_a_case_with_a_constant_index_becomes_its_branch():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        k = g.const("k", np.int32(2))
        y = mdsl.switch(k, [lambda: x + 1.0, lambda: x * 2.0, lambda: ops.tanh(x)])
        g.output(y, "y")
    g2 = run(g, "fold_control_flow", "dce")
    assert op_types(g2) == ["Input", "Tanh", "Output"]
    assert_preserves_results(g, g2)


def test_a_loop_whose_condition_is_constant_false_becomes_its_initial_values():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        y = mdsl.while_loop(lambda v: False, lambda v: v * 2.0, x)
        g.output(y, "y")
    g2 = run(g, "fold_control_flow", "dce")
    assert op_types(g2) == ["Input", "Output"]
    assert_preserves_results(g, g2)


def test_a_branch_result_with_a_declared_dynamic_dim_is_not_inlined():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        y = mdsl.cond(True, lambda: x, lambda: x[1:], shapes=("S",))
        g.output(y.sum(), "y")
    g2 = run(g, "fold_control_flow")
    assert not g2.pass_log[0].changed and g2.has_node("cond/If")


def test_small_captured_constants_move_into_the_subgraphs_and_fold_there():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        scale = g.const("scale", np.float32(2.0))
        big = g.const("big", np.ones(100, np.float32))
        y = mdsl.cond(
            x.sum() > 0.0, lambda: x * ops.exp(scale) + big[:4], lambda: x - scale, name="c"
        )
        g.output(y, "y")
    g2 = run(g, "fold_control_flow", "fold_constants", "dce")
    node = g2.node("c/If")
    assert [t.name for t in node.inputs] == ["Greater", "x", "big"]  # big stays outside
    then = node.subgraphs["then_branch"]
    assert op_types(then) == ["Input", "Input", "Const", "Mul", "Slice", "Add", "Output"]
    assert then.node("c/then/Exp").const_value() == np.exp(np.float32(2.0))
    assert_preserves_results(g, g2)


# -- hoist_loop_invariants -------------------------------------------------------------------------
def build_invariant_loop(counter=None) -> mdsl.Graph:
    with mdsl.Graph("loop") as g:
        x = g.input("x", ("N", 4))
        n = g.input("n", (), "int64")

        def body(i, acc):
            scale = ops.exp(x.sum(axis=0)) * 0.01  # reads only x: invariant
            noisy = counter(acc) if counter else acc
            return i + 1, ops.tanh(noisy * scale + acc)

        _, acc = mdsl.while_loop(lambda i, acc: i < n, body, (0, x))
        g.output(acc, "y")
    return g


def test_loop_invariant_nodes_move_before_the_loop():
    g = build_invariant_loop()
    g2 = run(g, "hoist_loop_invariants")
    assert g2.pass_log[0].summary == "hoisted 3 node(s) out of loops"
    assert names(g2) == [
        "x",
        "n",
        "Const",
        "while/body/Const",  # a copy of the body's 0.01, which the hoisted Mul reads
        "while/body/ReduceSum",
        "while/body/Exp",
        "while/body/Mul",
        "while/While",
        "Output_y",
    ]
    loop = g2.node("while/While")
    assert [t.name for t in loop.inputs] == ["Const", "x", "n", "x", "while/body/Mul"]
    body = loop.subgraphs["body"]
    assert "while/body/Exp" not in names(body)
    assert subgraph_params(body)[-1].name == "while/body/captured/Mul"
    assert subgraph_params(loop.subgraphs["cond"])[-1].name == "while/cond/captured/while/body/Mul"
    assert count_nodes(g2) == count_nodes(g) + 3  # two parameters, a copy of the constant
    assert_same_on(g, g2, feeds_for(3))
    assert_same_on(g, g2, feeds_for(0))


def test_stateful_ops_are_not_hoisted():
    with restored_registries():

        @mdsl.op_proto("Tick", inputs={"x": "any"}, outputs={"y": "any"})
        def tick(x):
            return x

        mdsl.ops.registry.get_op("Tick").extra["stateful"] = True
        mdsl.register_op_impl("Tick", lambda x: x.copy())
        with mdsl.Graph() as g:
            x = g.input("x", (4,))
            n = g.input("n", (), "int64")
            _, acc = mdsl.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + tick(x)), (0, x))
            g.output(acc, "y")
        g2 = run(g, "hoist_loop_invariants")
        assert not g2.pass_log[0].changed
        assert "while/body/Tick" in names(g2.node("while/While").subgraphs["body"])


def test_an_invariant_of_two_nested_loops_leaves_both():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        n = g.input("n", (), "int64")

        def inner_body(j, b):
            return j + 1, b + ops.exp(x) * 0.1

        def outer_body(i, a):
            _, b = mdsl.while_loop(lambda j, b: j < n, inner_body, (0, a))
            return i + 1, ops.tanh(b)

        _, y = mdsl.while_loop(lambda i, a: i < n, outer_body, (0, x))
        g.output(y, "y")
    g2 = mdsl.optimize(g, level=2)
    assert "while/body/while/body/Exp" in names(g2)
    feeds = {"x": np.linspace(-1, 1, 4, dtype=np.float32), "n": np.int64(3)}
    assert_same_on(g, g2, feeds)


def test_a_node_sized_by_a_symbol_the_body_binds_stays_in_the_loop():
    """ConstantOfShape((k,)) has no inputs, but k is bound in the body each iteration
    (a value dim of the counter): hoisting it would size it once, before k exists.
    The ValueDims binding k stays too, though no edge reads its output."""
    with mdsl.Graph() as g:
        n = g.input("n", (), "int64")
        x = g.input("x", (4,))

        def body(i, total):
            (k,) = ops.value_dims(ops.reshape(i, shape=(1,)))
            ones = ops.constant_of_shape((k,), 1.0)
            hoistable = ops.reduce_sum(ops.exp(x), keepdims=False)
            return i + 1, total + ops.reduce_sum(ones, keepdims=False) + hoistable

        _, y = mdsl.while_loop(lambda i, t: i < n, body, (np.int64(0), np.float32(0.0)))
        g.output(y, "y")
    g2 = mdsl.optimize(g, level=2)
    body = names(g2.node("while/While").subgraphs["body"])
    assert "while/body/ConstantOfShape" in body and "while/body/ValueDims" in body
    assert "while/body/Exp" in names(g2)  # what is invariant still leaves
    feeds = {"n": np.int64(4), "x": np.linspace(-1, 1, 4, dtype=np.float32)}
    assert_same_on(g, g2, feeds)
    assert mdsl.interpret(g2, {**feeds, "n": np.int64(0)})["y"] == 0.0


# -- prune_control_flow ----------------------------------------------------------------------------
def test_unread_if_outputs_go_from_the_node_and_every_branch():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        a, _unused, c = mdsl.cond(
            x.sum() > 0.0,
            lambda: (x + 1.0, ops.exp(x), x * 2.0),
            lambda: (x - 1.0, ops.tanh(x), x * 3.0),
        )
        g.output(a * c, "y")
    g2 = run(g, "prune_control_flow")
    node = g2.node("cond/If")
    assert [t.name for t in node.outputs] == ["cond/If", "cond/If:1"]
    for sub in node.subgraphs.values():
        assert [n.name for n in sub if n.op_type == "Output"] == ["Output_0", "Output_1"]
        assert not any(n.op_type in ("Exp", "Tanh") for n in sub)
    assert g2.node("Mul").inputs == node.outputs
    mdsl.ir.verify(g2)
    assert_preserves_results(g, g2)


def test_unneeded_loop_vars_go_needed_ones_stay():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        n = g.input("n", (), "int64")
        _, used, _, _ = mdsl.while_loop(
            lambda i, u, f, w: i < n,
            lambda i, u, f, w: (i + 1, u + f, f * 0.5, w * u),  # waste is read by no one
            (0, x, x, x),
            shapes=[None, None, None, ("W",)],
        )
        g.output(used, "y")
    g2 = run(g, "prune_control_flow")
    loop = g2.node("while/While")
    assert loop.attrs["num_loop_vars"] == 3 and loop.attrs["dynamic"] == ()
    assert [t.name.rsplit("/", 1)[-1] for t in subgraph_params(loop.subgraphs["body"])] == [
        "i",
        "u",
        "f",
        "n",
    ]
    assert len(subgraph_results(loop.subgraphs["body"])) == 3
    mdsl.ir.verify(g2)
    assert_preserves_results(g, g2)


def test_captures_no_subgraph_reads_are_no_longer_passed_in():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        y = g.input("y", (4,))
        out = mdsl.cond(x.sum() > 0.0, lambda: x + y * 0.0, lambda: x)
        g.output(out, "out")
    g2 = run(g, "simplify", "prune_control_flow")  # y * 0.0 stays (NaN/inf); drop it by hand
    assert [t.name for t in g2.node("cond/If").inputs] == ["Greater", "y", "x"]  # by first use
    then = g2.node("cond/If").subgraphs["then_branch"]
    then.node("Output_0").inputs[0] = subgraph_params(then)[1]
    g3 = run(g2, "prune_control_flow")
    assert [t.name for t in g3.node("cond/If").inputs] == ["Greater", "x"]
    for sub in g3.node("cond/If").subgraphs.values():
        assert [t.name.rsplit("/", 1)[-1] for t in subgraph_params(sub)] == ["x"]
    mdsl.ir.verify(g3)


# -- the general passes inside subgraphs -----------------------------------------------------------
def test_fold_simplify_cse_and_dce_work_inside_branches_and_bodies():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        n = g.input("n", (), "int64")

        def body(i, acc):
            dead = ops.exp(acc)  # noqa: F841 - read by no one
            two = ops.exp(ops.log(_const(np.float32(2))))
            return i + 1, ops.tanh(acc) * 1.0 + ops.tanh(acc) * two

        _, y = mdsl.while_loop(lambda i, acc: i < n, body, (0, x))
        z = mdsl.cond(x.sum() > 0.0, lambda: ops.identity(y) + 0.0, lambda: y)
        g.output(z, "z")
    g1 = mdsl.optimize(g, level=1)
    body = g1.node("while/While").subgraphs["body"]
    assert [n.op_type for n in body if n.op_type not in ("Input", "Output", "Const")] == [
        "Add",
        "Tanh",
        "Mul",
        "Add",
    ]
    then = g1.node("cond/If").subgraphs["then_branch"]
    assert op_types(then) == ["Input", "Output"]
    assert_same_on(g, g1, {"x": np.linspace(-1, 1, 4, dtype=np.float32), "n": np.int64(2)})


def test_optimize_never_mutates_a_graph_with_subgraphs():
    g = build_invariant_loop()
    before = g.to_json()
    mdsl.optimize(g, level=3)
    assert g.to_json() == before


def test_layout_runs_inside_a_branch():
    with mdsl.Graph() as g:
        img = g.input("img", (1, 3, 8, 8))
        w = mdsl.param("w", (4, 3, 3, 3))
        y = mdsl.cond(
            img.sum() > 0.0,
            lambda: ops.relu(ops.conv2d(img, w, pads=1)),
            lambda: ops.conv2d(img, w, pads=1),
        )
        g.output(y, "y")
    g3 = mdsl.optimize(g, level=3)
    then = g3.node("cond/If").subgraphs["then_branch"]
    assert [n.op_type for n in then].count("TransData") == 2
    feeds = {"img": np.random.default_rng(0).normal(size=(1, 3, 8, 8)).astype(np.float32)}
    assert_same_outputs(mdsl.interpret(g3, feeds), mdsl.interpret(g, feeds), rtol=1e-4, atol=1e-5)


# -- random graphs with cond and while_loop ----------------------------------------------------------
def _const(value) -> mdsl.Tensor:
    return context.current_graph().const("c", np.asarray(value))


STEPS = ("neg", "tanh", "add", "mul", "add0", "mul1", "const_expr", "repeat")


def _chain(draw, pool: list, length: int) -> mdsl.Tensor:
    """`length` random shape-preserving steps over tensors of `pool` (all one shape)."""
    local = list(pool)
    for _ in range(length):
        a, b = draw(st.sampled_from(local)), draw(st.sampled_from(local))
        step = draw(st.sampled_from(STEPS))
        if step == "neg":
            t = -a
        elif step == "tanh":
            t = ops.tanh(a)
        elif step in ("add", "repeat"):
            t = a + b if step == "add" else ops.tanh(a) + ops.tanh(a)
        elif step == "mul":
            t = ops.tanh(a) * b
        elif step == "add0":
            t = a + 0.0
        elif step == "mul1":
            t = a * 1.0
        else:
            t = a * ops.exp(_const(np.float32(draw(st.floats(-1, 1, width=32)))))
        local.append(t)
    return local[-1]


def _random_cond(draw, pool: list, n) -> mdsl.Tensor:
    kind = draw(st.sampled_from(("data", "data", "true", "false")))
    pred = draw(st.sampled_from(pool)).sum() > 0.0 if kind == "data" else (kind == "true")
    two = draw(st.booleans())

    def branch():
        first = _chain(draw, pool, draw(st.integers(1, 3)))
        return (first, _chain(draw, pool, 1)) if two else first

    result = mdsl.cond(pred, branch, branch)
    return result[draw(st.integers(0, 1))] if two else result


def _random_loop(draw, pool: list, n) -> mdsl.Tensor:
    captured, init = draw(st.sampled_from(pool)), draw(st.sampled_from(pool))
    never = draw(st.integers(0, 3)) == 0
    nested = draw(st.booleans())

    def body(i, acc, spare):
        invariant = ops.tanh(captured * 0.5)
        step = ops.tanh(_chain(draw, [acc, invariant, captured], draw(st.integers(1, 2))))
        if nested:
            step = mdsl.cond(i < 1, lambda: step * 2.0, lambda: step - invariant)
        return i + 1, step, spare + 1.0

    cond_fn = (lambda i, acc, spare: False) if never else (lambda i, acc, spare: i < n)
    _, acc, _ = mdsl.while_loop(cond_fn, body, (0, init, init), max_iterations=5)
    return acc


@st.composite
def control_flow_graphs(draw):
    rows = draw(st.sampled_from(("N", 2)))
    with mdsl.Graph("random_cf") as g:
        pool = [g.input("x", (rows, 3)), g.input("y", (rows, 3))]
        n = g.input("n", (), "int64")
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(("chain", "cond", "loop")))
            if kind == "chain":
                pool.append(_chain(draw, pool, draw(st.integers(1, 3))))
            else:
                pool.append((_random_cond if kind == "cond" else _random_loop)(draw, pool, n))
        for k, t in enumerate(dict.fromkeys([pool[-1], draw(st.sampled_from(pool))])):
            g.output(t, f"out{k}")
    size = 3 if rows == "N" else 2
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    feeds = {
        "x": rng.uniform(-2, 2, (size, 3)).astype(np.float32),
        "y": rng.uniform(-2, 2, (size, 3)).astype(np.float32),
        "n": np.int64(draw(st.integers(0, 4))),
    }
    return g, feeds


@settings(PROFILE, max_examples=30)
@given(control_flow_graphs())
def test_every_level_preserves_results_of_graphs_with_control_flow(drawn):
    g, feeds = drawn
    mdsl.ir.verify(g)
    want = mdsl.interpret(g, feeds)
    before = g.to_json()
    for level in range(4):
        optimized = mdsl.optimize(g, level=level)
        got = mdsl.interpret(optimized, feeds)
        assert_same_outputs(got, want, rtol=1e-5, atol=1e-6, what=f"level {level}")
        if level:
            assert not any(_decided_at_compile_time(n) for n in all_nodes(optimized))
    assert g.to_json() == before


def all_nodes(g: mdsl.Graph):
    return [n for sub in all_graphs(g) for n in sub]


def _decided_at_compile_time(node) -> bool:
    if node.op_type in ("If", "Case"):
        return node.inputs[0].producer.op_type == "Const"
    if node.op_type == "While":
        (go,) = subgraph_results(control_flow(node).cond)
        return go.producer.op_type == "Const" and not go.producer.const_value().any()
    return False
