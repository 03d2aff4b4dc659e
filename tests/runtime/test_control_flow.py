"""The interpreter runs only what control flow takes: the selected branch of an If/Case,
a While's body exactly as often as its condition holds (max_iterations enforced), with
symbolic dims bound from feeds and, for declared dynamic dims, from the arrays; and
`mdsl.compare` reports the tensors of the taken branches under their full names.

Counting and exploding Python-bound ops prove what ran; results are checked against the
same computation written in plain numpy."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.runtime import compare as compare_module
from tests.user_lines import assert_points_at

pytestmark = pytest.mark.usefixtures("sandbox")


class Probe:
    """Python-bound ops that count their calls ("Count") or raise if run ("Explode")."""

    def __init__(self):
        self.calls: dict[str, int] = {}

        @mdsl.op_proto("Count", inputs={"x": "any"}, outputs={"y": "any"},
                       attrs={"tag": mdsl.Attr(str)})  # fmt: skip
        def count(x, *, tag):
            return x

        @mdsl.register_op_impl("Count")
        def count_ref(x, *, tag):
            self.calls[tag] = self.calls.get(tag, 0) + 1
            return x.copy()

        @mdsl.op_proto("Explode", inputs={"x": "any"}, outputs={"y": "any"})
        def explode(x):
            return x

        @mdsl.register_op_impl("Explode")
        def explode_ref(x):
            raise AssertionError("a branch that was not taken ran")

        self.count, self.explode = count, explode


@pytest.fixture
def probe():
    return Probe()


# -- If and Case: only the taken branch runs -----------------------------------------------------
def build_if(probe) -> mdsl.Graph:
    with mdsl.Graph("if") as g:
        x = g.input("x", ("N", 3))
        big = x.sum() > 0.0
        y = mdsl.cond(
            big,
            lambda: probe.count(x * 2.0, tag="then"),
            lambda: probe.count(ops.exp(x), tag="else"),
        )
        g.output(y, "y")
    return g


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_only_the_taken_branch_of_an_if_runs(probe, sign):
    g = build_if(probe)
    x = sign * np.abs(np.random.default_rng(0).normal(size=(4, 3))).astype(np.float32)
    y = mdsl.interpret(g, {"x": x})["y"]
    taken = "then" if sign > 0 else "else"
    assert probe.calls == {taken: 1}
    np.testing.assert_allclose(y, x * 2.0 if sign > 0 else np.exp(x), rtol=1e-6)


def test_a_branch_that_would_fail_is_never_run(probe):
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        g.output(mdsl.cond(x.sum() > 0.0, lambda: x + 1.0, lambda: probe.explode(x)), "y")
    y = mdsl.interpret(g, {"x": np.ones(2, np.float32)})["y"]
    np.testing.assert_array_equal(y, [2.0, 2.0])
    with pytest.raises(mdsl.ExecutionError) as e:
        mdsl.interpret(g, {"x": -np.ones(2, np.float32)})
    assert e.value.node == "cond/else/Explode" and "branch that was not taken ran" in str(e.value)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_only_the_selected_case_runs(probe, index):
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        k = g.input("k", (), "int64")
        branches = [lambda i=i: probe.count(x * float(i + 1), tag=f"b{i}") for i in range(3)]
        g.output(mdsl.switch(k, branches), "y")
    x = np.arange(3, dtype=np.float32)
    y = mdsl.interpret(g, {"x": x, "k": np.int64(index)})["y"]
    assert probe.calls == {f"b{index}": 1}
    np.testing.assert_array_equal(y, x * (index + 1))


def test_a_case_index_out_of_range_is_an_execution_error():
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        k = g.input("k", (1,), "int32")
        g.output(mdsl.switch(k, [lambda: x, lambda: -x]), "y")  # <- switch
    with pytest.raises(mdsl.ExecutionError) as e:
        mdsl.interpret(g, {"x": np.ones(3, np.float32), "k": np.array([2], np.int32)})
    assert e.value.node == "switch/Case" and e.value.op_type == "Case"
    assert e.value.message == "index 2 is outside [0, 1] (2 branches)"
    assert_points_at(e.value.source, __file__, "switch")


# -- While ---------------------------------------------------------------------------------------
def build_loop(probe, max_iterations=None) -> mdsl.Graph:
    with mdsl.Graph("loop") as g:
        x = g.input("x", ("N",))
        n = g.input("n", (), "int64")
        i, acc = mdsl.while_loop(  # <- loop
            lambda i, acc: probe.count(i, tag="cond") < n,
            lambda i, acc: (i + 1, probe.count(acc * 0.5 + x, tag="body")),
            (g.const("zero", np.int64(0)), x),
            max_iterations=max_iterations,
        )
        g.output(acc, "acc")
        g.output(i, "i")
    return g


def reference_loop(x, n):
    acc = x
    for _ in range(n):
        acc = acc * np.float32(0.5) + x
    return acc


@pytest.mark.parametrize("n", [0, 1, 5])
def test_the_body_runs_as_often_as_the_condition_holds(probe, n):
    g = build_loop(probe)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    out = mdsl.interpret(g, {"x": x, "n": np.int64(n)})
    assert probe.calls == ({"cond": n + 1, "body": n} if n else {"cond": 1})
    assert out["i"] == n
    np.testing.assert_allclose(out["acc"], reference_loop(x, n), rtol=1e-6)


def test_max_iterations_is_enforced(probe):
    g = build_loop(probe, max_iterations=3)
    x = np.ones(2, np.float32)
    ok = mdsl.interpret(g, {"x": x, "n": np.int64(3)})  # exactly the limit
    assert ok["i"] == 3
    with pytest.raises(mdsl.ExecutionError) as e:
        mdsl.interpret(g, {"x": x, "n": np.int64(4)})
    assert (e.value.node, e.value.op_type) == ("while/While", "While")
    assert e.value.message == "the loop is still running after max_iterations=3"
    assert_points_at(e.value.source, __file__, "loop")


def test_max_iterations_zero_allows_only_a_loop_that_does_not_run(probe):
    g = build_loop(probe, max_iterations=0)
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(mdsl.interpret(g, {"x": x, "n": np.int64(0)})["acc"], x)
    with pytest.raises(mdsl.ExecutionError, match="max_iterations=0"):
        mdsl.interpret(g, {"x": x, "n": np.int64(1)})


def test_a_cond_nested_in_a_loop_takes_one_branch_per_iteration(probe):
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        n = g.input("n", (), "int64")

        def body(i, acc):
            even = ops.equal(ops.mod(i, 2), 0)
            step = mdsl.cond(
                even,
                lambda: probe.count(acc * 2.0, tag="even"),
                lambda: probe.count(acc - x, tag="odd"),
            )
            return i + 1, step

        _, acc = mdsl.while_loop(lambda i, acc: i < n, body, (0, x))
        g.output(acc, "y")
    x = np.array([1.0, -2.0, 0.5], np.float32)
    y = mdsl.interpret(g, {"x": x, "n": np.int64(5)})["y"]
    want = x.copy()
    for i in range(5):
        want = want * 2.0 if i % 2 == 0 else want - x
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert probe.calls == {"even": 3, "odd": 2}


def test_a_loop_var_with_a_growing_dim_is_rebound_each_iteration():
    with mdsl.Graph() as g:
        row = g.input("row", (1, 2))
        n = g.input("n", (), "int64")
        seq = mdsl.while_loop(
            lambda s: ops.size(s) < n * 2,
            lambda s: ops.concat([s, row + ops.cast(ops.size(s), to="float32")], axis=0),
            np.zeros((0, 2), np.float32),
            shapes=(mdsl.Dim("L", max=6), 2),
        )
        g.output(seq * 1.0, "seq")
    row = np.array([[1.0, 2.0]], np.float32)
    got = mdsl.interpret(g, {"row": row, "n": np.int64(4)})["seq"]
    want = np.concatenate([row + 2 * k for k in range(4)])
    np.testing.assert_array_equal(got, want)
    with pytest.raises(mdsl.ExecutionError) as e:  # a 7th row: L = 7 > 6
        mdsl.interpret(g, {"row": row, "n": np.int64(7)})
    assert e.value.node == "while/While"
    assert (
        e.value.message == "subgraph input 'while/cond/s' dim 0: L = 7 is outside its range [0, 6]"
    )


# -- dynamic shapes ------------------------------------------------------------------------------
def build_dynamic_rows() -> mdsl.Graph:
    """x (N, 4), N in [1, 16]; a cond keeping every row or every second one: R rows."""
    with mdsl.Graph("rows") as g:
        x = g.input("x", (mdsl.Dim("N", min=1, max=16), 4))
        rows = mdsl.Dim("R", min=1, max=16)
        kept = mdsl.cond(
            x.sum() > 0.0,
            lambda: x,
            lambda: ops.slice(x, starts=[0], ends=[2**62], axes=[0], steps=[2]),
            shapes=(rows, 4),
        )
        g.output(ops.reshape(kept, shape=(-1,)) * 2.0, "flat")
        g.output(kept.sum(axis=1), "sums")
    return g


@pytest.mark.parametrize("n", [1, 7, 16])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_symbolic_batches_and_branch_dependent_dims_in_one_graph(n, sign):
    g = build_dynamic_rows()
    x = sign * (np.arange(n * 4, dtype=np.float32).reshape(n, 4) + 1.0)
    out = mdsl.interpret(g, {"x": x})
    kept = x if sign > 0 else x[::2]
    np.testing.assert_array_equal(out["flat"], kept.reshape(-1) * 2.0)
    np.testing.assert_array_equal(out["sums"], kept.sum(axis=1))


def test_feeds_out_of_range_or_inconsistent_are_rejected():
    g = build_dynamic_rows()
    with pytest.raises(mdsl.ExecutionError, match=r"input 'x' dim 0: N = 17 is outside"):
        mdsl.interpret(g, {"x": np.ones((17, 4), np.float32)})
    with pytest.raises(mdsl.ExecutionError, match=r"input 'x' dim 1: size 5, declared 4"):
        mdsl.interpret(g, {"x": np.ones((3, 5), np.float32)})


def test_a_dynamic_dim_outside_its_range_names_the_node_and_output():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 2))
        y = mdsl.cond(
            x.sum() > 0.0,
            lambda: x,
            lambda: ops.concat([x, x], axis=0),
            shapes=(mdsl.Dim("S", max=4), 2),
        )
        g.output(y, "y")
    assert mdsl.interpret(g, {"x": -np.ones((2, 2), np.float32)})["y"].shape == (4, 2)
    with pytest.raises(mdsl.ExecutionError) as e:
        mdsl.interpret(g, {"x": -np.ones((3, 2), np.float32)})
    assert e.value.node == "cond/If"
    assert e.value.message == "output 0 dim 0: S = 6 is outside its range [0, 4]"


def test_outputs_sharing_a_dynamic_symbol_must_agree():
    with mdsl.Graph() as g:
        x = g.input("x", ("N",))
        a, b = mdsl.cond(
            x.sum() > 0.0,
            lambda: (x, x),
            lambda: (x[1:], x),  # the second result keeps N rows: not S
            shapes=[("S",), ("S",)],
        )
        g.output(a, "a")
        g.output(b, "b")
    np.testing.assert_array_equal(mdsl.interpret(g, {"x": np.ones(3, np.float32)})["b"], 1.0)
    with pytest.raises(mdsl.ExecutionError, match=r"output 1 dim 0: S = 3, but S = 2 already"):
        mdsl.interpret(g, {"x": -np.ones(3, np.float32)})


# -- capture and compare -------------------------------------------------------------------------
def test_capture_holds_the_taken_branch_under_full_names(probe):
    g = build_if(probe)
    values = mdsl.interpret(g, {"x": np.ones((2, 3), np.float32)}, capture=True)
    assert "cond/then/Mul" in values and "cond/then/Count" in values
    assert not any(name.startswith("cond/else/") and "captured" not in name for name in values)
    np.testing.assert_array_equal(values["cond/If"], values["cond/then/Count"])


def test_capture_in_a_loop_holds_the_last_iteration():
    with mdsl.Graph() as g:
        x = g.input("x", ())
        _, acc = mdsl.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + 1.0), (0, x))
        g.output(acc, "y")
    values = mdsl.interpret(g, {"x": np.float32(10.0)}, capture=True)
    assert values["while/body/Add_1"] == 13.0 and values["while/body/a"] == 12.0
    assert values["while/cond/Less"] == np.False_


def test_compare_reports_the_taken_branch_and_finds_a_wrong_tensor_inside_it(probe):
    g = build_if(probe)
    feeds = {"x": np.ones((2, 3), np.float32)}
    rep = mdsl.compare(g, feeds)
    assert rep.ok
    assert [r.tensor for r in rep.rows] == [
        "ReduceSum",
        "Greater",
        "cond/then/Mul",
        "cond/then/Count",
        "cond/If",
    ]

    def wrong_mul(graph, f):
        values = mdsl.interpret(graph, f, capture=True)
        values["cond/then/Mul"] = values["cond/then/Mul"] + 1.0
        values["cond/If"] = values["cond/If"] + 1.0
        return values

    compare_module.register_backend("wrong-mul", wrong_mul)
    try:
        bad = mdsl.compare(g, feeds, backend="wrong-mul")
    finally:
        compare_module._BACKENDS.pop("wrong-mul")
    assert bad.first_mismatch.tensor == "cond/then/Mul"
    assert bad.first_mismatch.layer == "cond/then"


def test_compare_with_a_promoted_reference_goes_through_subgraphs():
    with mdsl.Graph() as g:
        x = g.input("x", ("N",), "float16")
        y = mdsl.cond(x.sum() > 0.0, lambda: (x + 1000.0) - 1000.0, lambda: x)
        g.output(y, "y")
    feeds = {"x": np.linspace(0.1, 0.3, 8).astype(np.float16)}
    rep = mdsl.compare(g, feeds, reference_dtype="float32")
    assert rep.first_mismatch.tensor == "cond/then/Sub"
    promoted = compare_module.promote_graph(g)
    then = promoted.node("cond/If").subgraphs["then_branch"]
    assert {t.dtype for n in then for t in n.outputs} == {mdsl.float32}


def test_expr_bindings_run_inside_subgraphs():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        y = mdsl.cond(x.sum() > 0.0, lambda: ops.sigmoid(x) * 2.0, lambda: ops.tanh(x))
        g.output(y, "y")
    x = np.linspace(0.1, 1, 4, dtype=np.float32)
    got = mdsl.interpret(g, {"x": x}, impl="expr")["y"]
    np.testing.assert_allclose(got, 2.0 / (1.0 + np.exp(-x)), rtol=1e-6)
