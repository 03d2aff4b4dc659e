"""cse: same op, same inputs, same attrs merge; constants merge by content."""

from __future__ import annotations

import numpy as np

import mdsl
from mdsl import ops
from tests.passes.checks import assert_preserves_results, count, op_types


def cse(g):
    return mdsl.passes.run(g, ["cse"])


def test_duplicate_chains_merge_and_readers_are_rewired():
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 3))
        a = ops.relu(ops.exp(x))
        b = ops.relu(ops.exp(x))
        g.output(a - b, "y")
        g.output(b, "z")
    g2 = cse(g)
    assert op_types(g2) == ["Input", "Exp", "Relu", "Sub", "Output", "Output"]
    sub = g2.node("Sub")
    assert sub.inputs[0] is sub.inputs[1] is g2.node("Relu").output
    assert g2.outputs["z"] is g2.node("Relu").output
    assert g2.pass_log[0].summary == "merged 2 duplicate node(s)"
    assert_preserves_results(g, g2)


def test_commutative_ops_merge_in_either_order_others_do_not():
    with mdsl.Graph("g") as g:
        x, y = g.input("x", (3,)), g.input("y", (3,))
        g.output(x + y, "a")
        g.output(y + x, "b")
        g.output(x - y, "c")
        g.output(y - x, "d")
    g2 = cse(g)
    assert count(g2, "Add") == 1 and count(g2, "Sub") == 2
    assert_preserves_results(g, g2)


def test_different_attrs_do_not_merge():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2, 3))
        g.output(x.sum(axis=0) + x.sum(axis=0), "a")
        g.output(x.sum(axis=1), "b")
        g.output(x.sum(axis=0, keepdims=True), "c")
    g2 = cse(g)
    assert count(g2, "ReduceSum") == 3
    assert_preserves_results(g, g2)


def test_constants_merge_by_content_whatever_their_names():
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        a = g.const("a", np.array([1, 2, 3], np.float32))
        b = g.const("b", np.array([1, 2, 3], np.float32))
        c = g.const("c", np.array([1, 2, 4], np.float32))
        d = g.const("d", np.array([1, 2, 3], np.float64))
        neg_zero = g.const("nz", np.float32(-0.0))
        zero = g.const("z", np.float32(0.0))
        g.output(x * a + x * b, "y")
        g.output(x * c + d.astype("float32") * (neg_zero + zero), "w")
    g2 = cse(g)
    names = [n.name for n in g2 if n.op_type == "Const"]
    assert names == ["a", "c", "d", "nz", "z"]  # b merged into a; -0.0 is not 0.0
    assert count(g2, "Mul") == 3  # x*a and x*b became one
    assert_preserves_results(g, g2)


def test_only_constants_agreeing_on_a_sample_are_hashed_whole(monkeypatch):
    """Weights of equal shapes (BERT's twelve layers) cost a sample each, not their bytes;
    twins whose samples agree are told apart by their whole content."""
    from mdsl.passes import cse as cse_module

    n = cse_module.SAMPLE_VALUES * 8
    rng = np.random.default_rng(0)
    distinct = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    twin = distinct[0].copy()
    near_twin = distinct[0].copy()
    near_twin[1] += 1.0  # off the sampled positions (every 8th value)
    hashed = []
    whole = cse_module._content_digest
    monkeypatch.setattr(cse_module, "_content_digest", lambda a: hashed.append(a) or whole(a))
    with mdsl.Graph("g") as g:
        x = g.input("x", (n,))
        arrays = [*distinct, twin, near_twin]
        total = x
        for i, value in enumerate(arrays):
            total = total + g.const(f"w{i}", value)
        g.output(total, "y")
    g2 = cse(g)
    assert [n.name for n in g2 if n.op_type == "Const"] == ["w0", "w1", "w2", "w3", "w5"]
    assert len(hashed) == 3  # w0, its twin w4 and near-twin w5; not w1..w3
    assert_preserves_results(g, g2)


def test_zero_and_one_parameters_merge_without_generating_values():
    with mdsl.Graph("g") as g:
        x = g.input("x", (4,))
        ones = [mdsl.param(f"g{i}", (4,), init="ones") for i in range(3)]
        normal = [mdsl.param(f"w{i}", (4,)) for i in range(2)]
        g.output(x * ones[0] * ones[1] * ones[2] + normal[0] + normal[1], "y")
    g2 = cse(g)
    assert [n.name for n in g2 if n.op_type == "Const"] == ["g0", "w0", "w1"]
    assert_preserves_results(g, g2)


def test_devices_keep_nodes_apart():
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        with mdsl.device("npu:0"):
            a = ops.exp(x)
        with mdsl.device("npu:1"):
            b = ops.exp(x)
        g.output(a + b, "y")
    assert count(cse(g), "Exp") == 2


def test_identical_subgraphs_merge_different_ones_do_not(region):
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        r1 = region(g, x, lambda v: ops.exp(v) + 1.0)
        r2 = region(g, x, lambda v: ops.exp(v) + 1.0)
        r3 = region(g, x, lambda v: ops.exp(v) + 2.0)
        g.output(r1 + r2 + r3, "y")
    g2 = cse(g)
    assert count(g2, "TestRegion") == 2
    assert g2.node("Add").inputs[0] is g2.node("Add").inputs[1]


def test_cse_inside_subgraphs(region):
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        g.output(region(g, x, lambda v: ops.exp(v) * ops.exp(v)), "y")
    body = cse(g).node("TestRegion").subgraphs["body"]
    assert op_types(body) == ["Exp", "Mul", "Output"]
