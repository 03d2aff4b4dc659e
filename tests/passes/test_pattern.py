"""Patterns: the Pat matcher, PatternMatcher tables and user rewrite passes."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.passes import Pat, PatternMatcher, rewrite_pass
from mdsl.passes.pattern import match_pattern
from tests.op_sandbox import restored_registries
from tests.passes.checks import assert_preserves_results, count, op_types


def match(pat, tensor):
    bindings = {}
    return bindings if match_pattern(pat, tensor, bindings) else None


def test_variables_bind_and_repeated_names_must_be_the_same_tensor():
    with mdsl.Graph("g") as g:
        a, b = g.input("a", (2,)), g.input("b", (2,))
        g.output(a * a, "sq")
        g.output(a * b, "ab")
    square = Pat("Mul", Pat.var("x"), Pat.var("x"))
    assert match(square, g.outputs["sq"]) == {"x": g.inputs["a"]}
    assert match(square, g.outputs["ab"]) is None
    assert match(Pat("Add", Pat.var("x"), Pat.var("y")), g.outputs["ab"]) is None


def test_commutative_ops_match_either_order_with_backtracking():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,))
        y = g.output(ops.exp(x) + 0.0, "y")  # noqa: F841
    t = g.outputs["y"]
    assert match(Pat("Add", Pat.const(0), Pat("Exp", Pat.var("x"))), t) == {"x": g.inputs["x"]}
    assert match(Pat("Add", Pat.const(1), Pat.var("x")), t) is None


def test_constants_match_by_value_in_any_dtype_and_small_splats():
    with mdsl.Graph("g") as g:
        x16 = g.input("x", (3,), "float16")
        g.output(x16 * 2.0, "a")
        g.output(x16 * np.full(3, 2.0, np.float16), "b")
        g.output(x16 * np.array([2.0, 2.0, 3.0], np.float16), "c")
    two = Pat("Mul", Pat.var("x"), Pat.const(2.0))
    assert match(two, g.outputs["a"]) is not None
    assert match(two, g.outputs["b"]) is not None
    assert match(two, g.outputs["c"]) is None
    exact = Pat("Mul", Pat.var("x"), Pat.const(np.array([2.0, 2.0, 3.0])))
    assert match(exact, g.outputs["c"]) is not None


def test_attrs_and_where_conditions():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2, 3))
        g.output(x.sum(axis=1), "s")
    t = g.outputs["s"]
    assert match(Pat("ReduceSum", Pat.var("x"), attrs={"axes": (1,)}), t) is not None
    assert match(Pat("ReduceSum", Pat.var("x"), attrs={"axes": (0,)}), t) is None
    assert match(Pat("ReduceSum", Pat.var("x"), where=lambda t: t.ndim == 1), t) is not None
    assert match(Pat(("ReduceMax", "ReduceSum"), name="r"), t) == {"r": t}


def test_a_table_rewrites_a_whole_graph_in_one_sweep():
    table = PatternMatcher([(Pat("Neg", Pat("Neg", Pat.var("x"))), lambda m: m.x)])
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,))
        g.output(ops.neg(ops.neg(ops.neg(ops.neg(x)))) + ops.neg(ops.neg(x)), "y")
    assert table.sweep(g) == 3
    assert op_types(g) == ["Input", "Add", "Output"]
    mdsl.ir.verify(g)


def test_tables_compose():
    t1 = PatternMatcher([(Pat("Identity", Pat.var("x")), lambda m: m.x)])
    t2 = PatternMatcher([(Pat("Neg", Pat("Neg", Pat.var("x"))), lambda m: m.x)])
    assert len((t1 + t2).rules) == 2


def scale_relu_graph():
    @mdsl.layer
    def head(x):
        return ops.relu(x * 2.0)

    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 4))
        h = head(x)
        g.output(h + ops.relu(h * 2.0), "y")
    return g


@pytest.mark.usefixtures("restored_passes")
def test_rewrite_pass_replaces_every_match_and_keeps_layers():
    rewrite_pass("relu_first", lambda x: ops.relu(x * 2.0), lambda x: ops.relu(x) * 2.0)
    g = scale_relu_graph()
    g2 = mdsl.passes.run(g, ["relu_first", "dce"])
    assert [n.op_type for n in g2 if n.op_type not in ("Const",)] == [
        "Input",
        "Relu",
        "Mul",
        "Relu",
        "Mul",
        "Add",
        "Output",
    ]
    assert g2.pass_log[0].summary == "rewrote 2 match(es)"
    head_nodes = [n for n in g2 if n.layer == "head"]
    assert [n.op_type for n in head_nodes] == ["Relu", "Const", "Mul"]
    assert all(n.source == g.node("head/Relu").source for n in head_nodes)
    assert_preserves_results(g, g2)


@pytest.mark.usefixtures("restored_passes")
def test_meet_requirements_can_decline_a_match():
    rewrite_pass(
        "relu_first_static_only",
        lambda x: ops.relu(x * 2.0),
        lambda x: ops.relu(x) * 2.0,
        meet_requirements=lambda m: all(isinstance(d, int) for d in m.x.shape),
    )
    g = scale_relu_graph()  # x is (N, 4): declined
    g2 = mdsl.passes.run(g, ["relu_first_static_only"])
    assert not g2.pass_log[0].changed and op_types(g2) == op_types(g)


@pytest.mark.usefixtures("restored_passes")
def test_inner_nodes_read_elsewhere_block_the_rewrite_unless_allowed():
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        scaled = x * 2.0
        g.output(ops.relu(scaled), "y")
        g.output(scaled, "scaled")
    rewrite_pass("strict", lambda x: ops.relu(x * 2.0), lambda x: ops.relu(x) * 2.0)
    rewrite_pass(
        "loose", lambda x: ops.relu(x * 2.0), lambda x: ops.relu(x) * 2.0, single_use=False
    )
    assert not mdsl.passes.run(g, ["strict"]).pass_log[0].changed
    g2 = mdsl.passes.run(g, ["loose", "dce"])
    assert count(g2, "Mul") == 2 and count(g2, "Relu") == 1
    assert_preserves_results(g, g2)


@pytest.mark.usefixtures("restored_passes")
def test_replacements_of_another_type_are_ignored():
    rewrite_pass("bad_type", lambda x: ops.relu(x), lambda x: x.astype("float64"))
    with mdsl.Graph("g") as g:
        g.output(ops.relu(g.input("x", (3,))), "y")
    g2 = mdsl.passes.run(g, ["bad_type"])
    assert op_types(g2) == ["Input", "Relu", "Output"]


@pytest.mark.usefixtures("restored_passes")
def test_placeholder_types_for_patterns_that_need_them():
    with pytest.raises(mdsl.GraphError, match=r"tracing pattern .* failed.*types="):
        rewrite_pass("mm", lambda a, b: ops.matmul(a, b) * 2.0, lambda a, b: ops.matmul(a, b))
    rewrite_pass(
        "mm",
        lambda a, b: ops.matmul(a, b) * 1.0,
        lambda a, b: ops.matmul(a, b),
        types={"a": mdsl.TensorType(("M", "K")), "b": mdsl.TensorType(("K", "N"))},
    )
    with mdsl.Graph("g") as g:
        g.output((g.input("x", (2, 3)) @ g.input("w", (3, 4))) * 1.0, "y")
    assert op_types(mdsl.passes.run(g, ["mm", "dce"])) == ["Input", "Input", "MatMul", "Output"]


@pytest.mark.usefixtures("restored_passes")
def test_a_pattern_must_end_in_an_op():
    with pytest.raises(mdsl.GraphError, match="must return the output of an op node"):
        rewrite_pass("trivial", lambda x: x, lambda x: x)


@pytest.mark.usefixtures("restored_passes")
def test_rewrite_into_a_custom_fused_op_at_an_optimize_level():
    with restored_registries():

        @mdsl.op_proto(
            "ScaledRelu",
            inputs={"x": "float"},
            outputs={"y": "float"},
            attrs={"scale": mdsl.Attr(float)},
        )
        def scaled_relu(x, *, scale):
            return x

        mdsl.register_op_impl(
            "ScaledRelu", lambda x, *, scale: np.maximum(x * scale, 0).astype(x.dtype)
        )

        def requirements(m):
            return float(m.root.inputs[0].producer.inputs[1].producer.const_value()) > 0

        rewrite_pass(
            "fuse_scaled_relu",
            lambda x: ops.relu(x * 2.0),
            lambda x: scaled_relu(x, scale=2.0),
            meet_requirements=requirements,
            levels=(2,),
        )
        g = scale_relu_graph()
        g2 = mdsl.optimize(g, level=2)
        assert count(g2, "ScaledRelu") == 2 and count(g2, "Relu") == 0
        assert count(mdsl.optimize(g, level=1), "ScaledRelu") == 0
        assert_preserves_results(g, g2)


def test_fuse_matmul_add_is_built_with_rewrite_pass():
    from mdsl.passes import fold_bn
    from mdsl.passes.pattern import PatternRewrite

    assert isinstance(fold_bn._MATMUL_ADD, PatternRewrite)
    assert fold_bn._MATMUL_ADD.pat.op == ("Add",)
