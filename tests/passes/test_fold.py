"""fold_constants: what folds (and what must not), with results preserved."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.passes import fold
from tests.op_sandbox import restored_registries
from tests.passes.checks import assert_preserves_results, count, op_types


def fold_and_clean(g):
    return mdsl.passes.run(g, ["fold_constants", "dce"])


def test_constant_expression_becomes_one_const_named_after_its_root():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2, 3))
        c = (g.const("a", np.arange(3, dtype=np.float32)) + 1.0) * 2.0
        g.output(x + ops.exp(c - c), "y")
    g2 = fold_and_clean(g)
    assert op_types(g2) == ["Input", "Const", "Add", "Output"]
    folded = g2.node("Exp")  # the root of the folded expression keeps its name
    assert folded.op_type == "Const"
    np.testing.assert_array_equal(folded.const_value(), np.ones(3, np.float32))
    assert not folded.const_value().flags.writeable
    assert folded.source == g.node("Exp").source
    assert_preserves_results(g, g2)


def test_folding_materializes_parameters():
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 4))
        w = mdsl.param("w", (3, 4))
        g.output(x @ w.T, "y")
    g2 = fold_and_clean(g)
    assert op_types(g2) == ["Input", "Const", "MatMul", "Output"]
    np.testing.assert_array_equal(g2.node("Transpose").const_value(), g.node("w").const_value().T)
    assert_preserves_results(g, g2)


def test_static_shape_folds_symbolic_does_not():
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3, 4))
        g.output(ops.shape(x, start=1), "tail")  # (3, 4): known
        g.output(ops.shape(x), "all")  # holds N: run time
        g.output(ops.size(g.input("z", (2, 5))), "size")
    g2 = fold_and_clean(g)
    assert op_types(g2) == [
        *("Input", "Const", "Output"),
        *("Shape", "Output"),
        *("Input", "Const", "Output"),
    ]
    np.testing.assert_array_equal(g2.node("Shape").const_value(), [3, 4])
    assert int(g2.node("Size").const_value()) == 10
    assert_preserves_results(g, g2)


def test_gather_of_known_dims_of_a_symbolic_shape_folds():
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3, 4))
        s = ops.shape(x)
        known = ops.gather(s, g.const("i", np.array([2, -2])))
        unknown = ops.gather(s, g.const("j", np.array(0)))
        g.output(known, "known")
        g.output(unknown, "unknown")
    g2 = fold_and_clean(g)
    assert count(g2, "Gather") == 1 and count(g2, "Shape") == 1
    np.testing.assert_array_equal(g2.node("Gather").const_value(), [4, 3])
    assert_preserves_results(g, g2)


def test_results_over_the_size_cap_stay_unfolded(monkeypatch):
    monkeypatch.setattr(fold, "MAX_FOLDED_ELEMENTS", 10)
    with mdsl.Graph("g") as g:
        x = g.input("x", (4, 4))
        big = ops.expand(g.const("one", np.float32(1.0)), [4, 4])  # 16 elements
        small = ops.expand(g.const("two", np.float32(2.0)), [2, 4])  # 8 elements
        g.output(x + big, "y")
        g.output(small, "z")
    g2 = fold_and_clean(g)
    assert count(g2, "Expand") == 1 and g2.node("Expand").op_type == "Expand"
    assert g2.node("Expand_1").op_type == "Const"
    assert_preserves_results(g, g2)


def test_multi_output_nodes_fold_into_one_const_per_output():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,))
        a, b = ops.split(g.const("c", np.arange(4, dtype=np.float32)), num_outputs=2)
        g.output(x + a, "y")
        g.output(x * b, "z")
    g2 = fold_and_clean(g)
    assert count(g2, "Split") == 0 and count(g2, "Const") == 2
    assert {n.name for n in g2 if n.op_type == "Const"} == {"Split", "Split_1"}
    assert_preserves_results(g, g2)


def test_nodes_that_cannot_be_evaluated_now_are_left_for_run_time():
    with restored_registries():

        @mdsl.op_proto("Fails", inputs={"x": "float"}, outputs={"y": "float"})
        def fails(x):
            return x

        @mdsl.register_op_impl("Fails")
        def _fails_ref(x):
            raise ValueError("only at run time")

        @mdsl.op_proto("Stateful", inputs={"x": "float"}, outputs={"y": "float"})
        def stateful(x):
            return x

        mdsl.register_op_impl("Stateful", lambda x: x + 1)
        mdsl.ops.registry.get_op("Stateful").extra["stateful"] = True

        @mdsl.op_proto("ExprOnly", inputs={"x": "float"}, outputs={"y": "float"})
        def expr_only(x):
            return x

        with mdsl.Graph("g") as g:
            c = g.const("c", np.ones(2, np.float32))
            g.output(fails(c), "a")
            g.output(stateful(c), "b")
            g.output(expr_only(c), "c")
        g2 = fold_and_clean(g)
        assert op_types(g2) == [
            *("Const", "Fails", "Output"),
            *("Stateful", "Output", "ExprOnly", "Output"),
        ]
        assert g2.pass_log[0].changed is False


def test_integer_division_by_zero_folds_like_the_interpreter_runs_it():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,), "int32")
        q = g.const("a", np.array([6, 7], np.int32)) / g.const("b", np.array([3, 2], np.int32))
        g.output(x + q, "y")
    g2 = fold_and_clean(g)
    np.testing.assert_array_equal(g2.node("Div").const_value(), [2, 3])
    assert_preserves_results(g, g2)


def test_nothing_to_fold_reports_no_change():
    with mdsl.Graph("g") as g:
        g.output(ops.relu(g.input("x", (2,))), "y")
    g2 = mdsl.passes.run(g, ["fold_constants"])
    assert not g2.pass_log[0].changed
    assert g2.pass_log[0].summary == "folded 0 node(s) into constants"


def test_folds_inside_control_flow_subgraphs(region):
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        y = region(g, x, lambda v: v + ops.exp(np.zeros(3, np.float32)))
        g.output(y, "y")
    g2 = fold_and_clean(g)
    body = g2.node("TestRegion").subgraphs["body"]
    assert op_types(body) == ["Const", "Add", "Output"]
    assert body.node("Exp").op_type == "Const"
    assert g2.node("TestRegion").subgraphs["body"].parent is g2
    mdsl.ir.verify(g2)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_optimize_folds_at_every_level(level):
    with mdsl.Graph("g") as g:
        x = g.input("x", (2,))
        g.output(x * (g.const("a", 1.5) + 0.5), "y")
    g2 = mdsl.optimize(g, level=level)
    assert count(g2, "Mul") == 1 and count(g2, "Add") == 0
    assert float(g2.node("Add").const_value()) == 2.0
