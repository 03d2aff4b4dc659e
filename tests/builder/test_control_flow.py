"""mdsl.cond, mdsl.switch and mdsl.while_loop at build time: the nodes and self-contained
subgraphs they record, names and layers inside subgraphs, captured tensors made
explicit, declared dynamic dims, and errors naming the branch or loop var at the user's
line. Execution is tested in tests/runtime/test_control_flow.py."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ir.rewrite import clone_graph
from mdsl.ops.control_flow import (
    check_self_contained,
    control_flow,
    subgraph_params,
    subgraph_results,
)
from tests.user_lines import assert_error_at, assert_points_at


def names(g: mdsl.Graph) -> list[str]:
    return [n.name for n in g]


def describe(tensors) -> list[str]:
    return [t.type.describe() for t in tensors]


@mdsl.layer
def small_path(x):
    return ops.relu(x) * 0.5


@mdsl.layer(name="Detector")
def detector(x, w):
    big = x.sum() > 100.0
    return mdsl.cond(
        big,
        lambda: ops.resize(x, sizes=(4, 4), axes=(2, 3)) @ w,
        lambda: small_path(ops.resize(x, sizes=(4, 4), axes=(2, 3), mode="linear")) @ w,
    )


def build_detector() -> mdsl.Graph:
    with mdsl.Graph("det") as g:
        x = g.input("x", (1, 3, "H", "W"))
        w = g.input("w", (4, 2))
        g.output(detector(x, w), "y")
    return g


# -- structure ---------------------------------------------------------------------------------
def test_cond_records_an_if_node_with_self_contained_branches():
    g = build_detector()
    mdsl.ir.verify(g)
    node = g.node("Detector/cond/If")
    cf = control_flow(node)
    assert [t.name for t in node.inputs] == ["Detector/Greater", "x", "w"]
    assert list(node.subgraphs) == ["then_branch", "else_branch"]
    then, other = cf.branches
    assert (then.name, other.name) == ("Detector/cond/then", "Detector/cond/else")
    assert then.parent is g and other.parent is g
    for sub in cf.branches:
        check_self_contained(sub.name, sub)
        assert describe(subgraph_params(sub)) == ["float32[1,3,H,W]", "float32[4,2]"]
    assert [t.name for t in subgraph_params(then)] == [
        "Detector/cond/then/captured/x",
        "Detector/cond/then/captured/w",
    ]
    assert describe(subgraph_results(then)) == ["float32[1,3,4,2]"]
    assert describe(node.outputs) == ["float32[1,3,4,2]"]
    assert node.attrs == {"dynamic": ()}


def test_layers_and_names_work_inside_branches():
    g = build_detector()
    then, other = control_flow(g.node("Detector/cond/If")).branches
    assert names(then) == [
        "Detector/cond/then/captured/x",
        "Detector/cond/then/captured/w",
        "Detector/cond/then/Resize",
        "Detector/cond/then/MatMul",
        "Output_0",
    ]
    assert "Detector/cond/else/small_path/Relu" in names(other)
    assert other.node("Detector/cond/else/small_path/Relu").layer == (
        "Detector/cond/else/small_path"
    )
    assert g.layers["Detector/cond"].function == "mdsl.cond"
    assert g.layers["Detector/cond"].node_names == ["Detector/cond/If"]
    assert set(other.layers) == {"Detector/cond/else", "Detector/cond/else/small_path"}
    assert other.layers["Detector/cond/else/small_path"].node_names == [
        "Detector/cond/else/small_path/Relu",
        "Detector/cond/else/small_path/Const",
        "Detector/cond/else/small_path/Mul",
    ]


def test_a_second_cond_gets_its_own_scope_and_nodes_record_the_users_line():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        p = x.sum() > 0.0
        a = mdsl.cond(p, lambda: x + 1.0, lambda: x)
        b = mdsl.cond(p, lambda: x * 3.0, lambda: x)  # <- second-cond
        g.output(a + b, "y")
    assert a.name == "cond/If" and b.name == "cond_1/If"
    then = b.producer.subgraphs["then_branch"]
    assert names(then)[1:3] == ["cond_1/then/Const", "cond_1/then/Mul"]
    assert_points_at(b.producer.source, __file__, "second-cond")
    assert_points_at(then.node("cond_1/then/Mul").source, __file__, "second-cond")


def test_params_built_in_a_branch_live_in_its_subgraph():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        y = mdsl.cond(
            x.sum() > 0.0,
            lambda: x @ mdsl.param("w", (3, 3), init="ones"),
            lambda: x,
            name="pick",
        )
        g.output(y, "y")
    then = y.producer.subgraphs["then_branch"]
    assert then.node("pick/then/w").op_type == "Const"
    assert not g.has_node("pick/then/w")
    assert y.name == "pick/If"


def test_captures_are_collected_once_in_order_of_first_use():
    with mdsl.Graph() as g:
        a, b, c = (g.input(n, (2,)) for n in "abc")
        y = mdsl.cond(a.sum() > 0.0, lambda: b * a, lambda: c + b + c)
        g.output(y, "y")
    node = y.producer
    assert [t.name for t in node.inputs] == ["Greater", "b", "a", "c"]
    for sub in node.subgraphs.values():
        assert [t.name.rsplit("/", 1)[-1] for t in subgraph_params(sub)] == ["b", "a", "c"]


def test_a_branch_may_return_an_outer_tensor_or_a_python_scalar():
    with mdsl.Graph() as g:
        x = g.input("x", ())
        y = mdsl.cond(x > 0.0, lambda: x, lambda: 0.0)
        g.output(y, "y")
    then, other = control_flow(y.producer).branches
    assert subgraph_results(then) == subgraph_params(then)  # passed straight through
    assert subgraph_results(other)[0].producer.op_type == "Const"
    mdsl.ir.verify(g)


def test_a_python_bool_predicate_becomes_a_constant():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        y = mdsl.cond(True, lambda: x, lambda: -x)
        g.output(y, "y")
    pred = y.producer.inputs[0]
    assert pred.producer.op_type == "Const" and pred.producer.const_value() == np.True_


def test_tuple_results_give_a_tuple():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        lo, hi = mdsl.cond(x.sum() > 0.0, lambda: (x.min(), x.max()), lambda: (x.max(), x.min()))
        g.output(lo - hi, "y")
    assert (lo.name, hi.name) == ("cond/If", "cond/If:1")


def test_switch_records_a_case_node_with_one_subgraph_per_branch():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        k = g.input("k", (), "int32")
        y = mdsl.switch(k, [lambda: x, lambda: x * 2.0, lambda: ops.exp(x)])
        g.output(y, "y")
    node = y.producer
    assert (node.name, node.op_type) == ("switch/Case", "Case")
    assert list(node.subgraphs) == ["branch_0", "branch_1", "branch_2"]
    assert names(node.subgraphs["branch_2"])[-2:] == ["switch/branch_2/Exp", "Output_0"]
    mdsl.ir.verify(g)


def test_while_loop_records_cond_and_body_taking_loop_vars_then_captures():
    with mdsl.Graph() as g:
        n = g.input("n", (), "int64")
        x = g.input("x", ("N", 4))
        _, acc = mdsl.while_loop(
            lambda i, acc: i < n, lambda i, acc: (i + 1, acc * x), (g.const("i0", np.int64(0)), x)
        )
        g.output(acc, "y")
    node = acc.producer
    cf = control_flow(node)
    assert (node.name, node.op_type) == ("while/While", "While")
    assert node.attrs == {
        "num_loop_vars": 2,
        "max_iterations": None,
        "dynamic": (),
        "bounds": None,
    }
    assert [t.name for t in node.inputs] == ["i0", "x", "n", "x"]  # initial values, captures
    assert [t.name for t in cf.loop_inputs] == ["i0", "x"]
    assert [t.name for t in cf.captures] == ["n", "x"]
    assert [t.name for t in subgraph_params(cf.body)] == [
        "while/body/i",
        "while/body/acc",
        "while/body/captured/n",
        "while/body/captured/x",
    ]
    assert [t.name for t in subgraph_params(cf.cond)][:2] == ["while/cond/i", "while/cond/acc"]
    assert describe(subgraph_results(cf.cond)) == ["bool[]"]
    assert describe(node.outputs) == ["int64[]", "float32[N,4]"]
    assert g.layers["while"].function == "mdsl.while_loop"
    mdsl.ir.verify(g)


def test_one_loop_var_gives_one_tensor_and_scalars_become_constants():
    with mdsl.Graph() as g:
        limit = g.input("limit", ())
        y = mdsl.while_loop(lambda v: v < limit, lambda v: v * 2.0, 1.0, max_iterations=100)
        g.output(y, "y")
    assert isinstance(y, mdsl.Tensor) and y.producer.attrs["max_iterations"] == 100
    init = y.producer.inputs[0].producer
    assert init.op_type == "Const" and init.const_value().dtype == np.float32


def test_nested_cond_inside_a_loop_lifts_captures_through_both_levels():
    with mdsl.Graph() as g:
        x = g.input("x", (3,))
        scale = g.input("scale", ())

        def body(i, acc):
            flipped = mdsl.cond(i < 2, lambda: acc * scale, lambda: acc - x)
            return i + 1, flipped

        _, acc = mdsl.while_loop(lambda i, acc: i < 4, body, (0, x))
        g.output(acc, "y")
    loop = acc.producer
    assert [t.name for t in loop.inputs] == ["Const", "x", "scale", "x"]
    body_graph = loop.subgraphs["body"]
    inner = body_graph.node("while/body/cond/If")
    assert [t.name for t in inner.inputs] == [
        "while/body/Less",
        "while/body/acc",
        "while/body/captured/scale",
        "while/body/captured/x",
    ]
    assert inner.subgraphs["then_branch"].name == "while/body/cond/then"
    assert inner.subgraphs["then_branch"].parent is body_graph
    mdsl.ir.verify(g)


def test_nodes_in_branches_follow_the_device_scope():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with mdsl.device("npu:0"):
            y = mdsl.cond(x.sum() > 0.0, lambda: x + 1.0, lambda: x)
        g.output(y, "y")
    then = y.producer.subgraphs["then_branch"]
    assert y.producer.device == "npu:0"
    assert {n.device for n in then if n.op_type not in ("Input", "Output")} == {"npu:0"}


# -- declared dynamic dims -----------------------------------------------------------------------
def test_dims_that_differ_are_declared_with_a_new_symbol():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 4))
        rows = mdsl.Dim("R", min=1, max=64)
        y = mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x[1:], shapes=(rows, 4))
        g.output(y.sum(axis=0), "y")
    assert y.shape == (mdsl.Dim("R"), 4) and y.shape[0].max == 64
    assert y.producer.attrs["dynamic"] == ("R",)
    mdsl.ir.verify(g)


def test_a_loop_var_whose_dim_grows_is_declared_with_a_new_symbol():
    with mdsl.Graph() as g:
        row = g.input("row", (1, 3))
        seq = mdsl.while_loop(
            lambda s: ops.size(s) < 12,
            lambda s: ops.concat([s, row], axis=0),
            np.zeros((0, 3), np.float32),
            shapes=("L", 3),
        )
        g.output(seq, "seq")
    body = seq.producer.subgraphs["body"]
    assert describe(subgraph_params(body)) == ["float32[L,3]", "float32[1,3]"]
    assert describe(subgraph_results(body)) == ["float32[L+1,3]"]
    assert seq.producer.attrs["dynamic"] == ("L",)
    mdsl.ir.verify(g)


# -- errors --------------------------------------------------------------------------------------
def test_branch_dtypes_must_agree():
    @mdsl.layer(name="Detector")
    def det(x):
        return mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x.astype("float16"))  # <- dtypes

    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.DTypeError) as e:
            det(x)
        g.output(x, "y")
    assert_error_at(e.value, __file__, "dtypes", node="Detector/cond/If", op_type="If")
    assert e.value.message == (
        "result 0: branch 'else' gives float16[2], branch 'then' gives float32[2]; "
        "branches must agree in dtype"
    )


def test_branch_shapes_must_agree_unless_declared():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 4))
        with pytest.raises(mdsl.ShapeError) as e:
            mdsl.cond(x.sum() > 0.0, lambda: (x, x), lambda: (x, x[1:]))  # <- shapes
        g.output(x, "y")
    assert_error_at(e.value, __file__, "shapes", node="cond/If", op_type="If")
    assert e.value.message.startswith(
        "result 1: branch 'else' gives float32[N-1,4], branch 'then' gives float32[N,4]; "
        "declare the dims that may differ with shapes="
    )


def test_a_symbol_already_in_use_cannot_absorb_a_difference():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 4))
        with pytest.raises(mdsl.ShapeError) as e:
            mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x[1:], shapes=("N", 4))  # <- in-use
        g.output(x, "y")
    assert_error_at(e.value, __file__, "in-use", node="cond/If", op_type="If")
    assert "dim 0 is N-1, not N (a symbol in use already: it cannot vary)" in e.value.message


def test_a_declared_expression_of_a_new_symbol_is_refused():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 4))
        with pytest.raises(mdsl.ShapeError, match="must be a new symbol by itself"):
            mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x, shapes=(mdsl.Dim("S") + 1, 4))
        g.output(x, "y")


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda x: mdsl.cond(x.sum(), lambda: x, lambda: x), mdsl.DTypeError,
         "pred must be bool (compare it, e.g. x > 0), got float32[]"),
        (lambda x: mdsl.cond(x > 0.0, lambda: x, lambda: x), mdsl.ShapeError,
         "pred must hold one element, got bool[N]"),
        (lambda x: mdsl.cond(x.sum() > 0.0, lambda: (x, x), lambda: x), mdsl.GraphError,
         "branches return different numbers of values: branch 'then' 2, branch 'else' 1"),
        (lambda x: mdsl.cond(x.sum() > 0.0, lambda: None, lambda: x), mdsl.GraphError,
         "branch 'then' result 0 must be a Tensor, got NoneType"),
        (lambda x: mdsl.cond(x.sum() > 0.0, lambda y: y, lambda: x), mdsl.GraphError,
         "branch 'then' must take 0 argument(s)"),
        (lambda x: mdsl.cond(x.sum() > 0.0, x, lambda: x), mdsl.GraphError,
         "branch 'then' must be a function, got Tensor"),
        (lambda x: mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x, shapes=[("S",), ("T",)]),
         mdsl.GraphError, "shapes= gives 2 shapes for 1 values"),
        (lambda x: mdsl.switch(x.sum() > 0.0, [lambda: x]), mdsl.DTypeError,
         "index must be int32 or int64, got bool[]"),
    ],
    ids=["float-pred", "vector-pred", "counts", "none", "arity", "not-callable", "shapes-count",
         "bool-index"],
)  # fmt: skip
def test_branch_mistakes(build, error, message):
    with mdsl.Graph() as g:
        x = g.input("x", ("N",))
        with pytest.raises(error) as e:
            build(x)
        g.output(x, "y")
    assert e.value.message == message
    assert e.value.op_type in ("If", "Case") and e.value.source is not None


def test_switch_needs_a_list_of_branches():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.GraphError, match="non-empty list of branch functions"):
            mdsl.switch(0, [])
        g.output(x, "y")


def test_loop_carried_values_must_keep_their_type():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        with pytest.raises(mdsl.ShapeError) as e:
            mdsl.while_loop(  # <- loop-shape
                lambda i, seq: i < 3, lambda i, seq: (i + 1, ops.concat([seq, seq], 0)), (0, x)
            )
        g.output(x, "y")
    assert_error_at(e.value, __file__, "loop-shape", node="while/While", op_type="While")
    assert e.value.message == (
        "loop var 1 (seq): body_fn returns float32[8], the loop carries float32[4]: dim 0 is "
        "8, not 4; declare the dims that change with shapes= (a new symbol there)"
    )


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda x: mdsl.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a.astype("float16")),
                                   (0, x)), mdsl.DTypeError,
         "loop var 1 (a): body_fn returns float16[4], the loop carries float32[4]: dtype "
         "float16 is not float32"),
        (lambda x: mdsl.while_loop(lambda a: a, lambda a: a, x), mdsl.DTypeError,
         "the loop condition must be bool, got float32[4]"),
        (lambda x: mdsl.while_loop(lambda a: a > 0.0, lambda a: a, x), mdsl.ShapeError,
         "the loop condition must hold one element, got bool[4]"),
        (lambda x: mdsl.while_loop(lambda a: (a.sum() > 0.0, a.sum() > 0.0), lambda a: a, x),
         mdsl.GraphError, "the loop condition must give one value, got 2"),
        (lambda x: mdsl.while_loop(lambda i: i < 3, lambda i, a: (i, a), (0, x)),
         mdsl.GraphError, "cond_fn must take 2 argument(s)"),
        (lambda x: mdsl.while_loop(lambda i, a: i < 3, lambda i, a: i, (0, x)),
         mdsl.GraphError, "body_fn returns 1 values for 2 loop vars"),
        (lambda x: mdsl.while_loop(lambda a: a.sum() > 0.0, lambda a: a, x, max_iterations=-1),
         mdsl.GraphError, "max_iterations must be None or an int >= 0, got -1"),
        (lambda x: mdsl.while_loop(lambda a: a.sum() > 0.0, lambda a: a, x,
                                   shapes=(mdsl.Dim("L", min=5),)), mdsl.ShapeError,
         "loop var 0: the initial value float32[4] does not fit the declared shape [L]: "
         "dim 0 (4) is outside the range [5, inf] of L"),
        (lambda x: mdsl.while_loop(lambda a: a.sum() > 0.0, lambda a: a, ()), mdsl.GraphError,
         "mdsl.while_loop needs at least one loop var"),
        (lambda x: mdsl.while_loop(lambda a: a.sum() > 0.0, lambda a: a, "x"), mdsl.GraphError,
         "loop var 0 must be a Tensor, got str"),
    ],
    ids=["dtype", "cond-dtype", "cond-shape", "cond-count", "arity", "body-count",
         "max-iterations", "init-range", "no-vars", "not-a-tensor"],
)  # fmt: skip
def test_loop_mistakes(build, error, message):
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        with pytest.raises(error) as e:
            build(x)
        g.output(x, "y")
    assert e.value.message == message
    assert e.value.source is not None


def test_an_error_inside_a_branch_names_the_inner_node_and_line():
    @mdsl.layer(name="Head")
    def head(x):
        return mdsl.cond(x.sum() > 0.0, lambda: x @ x.reshape(2, 2), lambda: x)  # <- inner

    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        with pytest.raises(mdsl.ShapeError) as e:
            head(x)
        g.output(x, "y")
    assert_error_at(e.value, __file__, "inner", node="Head/cond/then/MatMul", op_type="MatMul")


def test_a_failed_cond_leaves_no_trace_in_the_graph():
    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.DTypeError):
            mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x.astype("int32"))
        y = mdsl.cond(x.sum() > 0.0, lambda: x, lambda: -x)
        g.output(y, "y")
    assert y.name == "cond/If"
    assert "cond_1" not in g.layers


def test_a_tensor_of_a_branch_cannot_be_used_outside_it():
    leaked = []

    def then():
        leaked.append(x * 2.0)
        return leaked[-1]

    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        y = mdsl.cond(x.sum() > 0.0, then, lambda: x)
        with pytest.raises(mdsl.GraphError, match="belongs to graph 'cond/then', not 'graph'"):
            leaked[0] + y
        g.output(y, "y")


def test_outside_a_graph():
    with pytest.raises(mdsl.GraphError, match=r"mdsl\.cond used outside a graph"):
        mdsl.cond(True, lambda: 1.0, lambda: 2.0)
    with pytest.raises(mdsl.GraphError, match=r"mdsl\.while_loop used outside a graph"):
        mdsl.while_loop(lambda v: v, lambda v: v, True)


# -- the verifier, serialization and copies ------------------------------------------------------
def build_loop_with_cond() -> mdsl.Graph:
    with mdsl.Graph("loop") as g:
        x = g.input("x", ("N", 3))
        n = g.input("n", (), "int64")

        def body(i, acc):
            step = mdsl.cond(i < 2, lambda: acc * 2.0, lambda: acc + x, name="step")
            return i + 1, step

        i, acc = mdsl.while_loop(lambda i, acc: i < n, body, (0, x), max_iterations=10)
        g.output(acc, "y")
        g.output(i, "i")
    return g


def structure(g: mdsl.Graph) -> list:
    rows = []
    for n in g:
        subs = {k: structure(s) for k, s in n.subgraphs.items()}
        ins = [None if t is None else t.name for t in n.inputs]
        rows.append((n.name, n.op_type, ins, n.attrs.get("dynamic"), describe(n.outputs), subs))
    return rows


def test_serialization_round_trips_control_flow(tmp_path):
    g = build_loop_with_cond()
    back = mdsl.Graph.from_json(g.to_json())
    assert structure(back) == structure(g)
    mdsl.save(g, tmp_path / "loop.mdsl")
    loaded = mdsl.load(tmp_path / "loop.mdsl")
    assert structure(loaded) == structure(g)
    body = loaded.node("while/While").subgraphs["body"]
    assert body.parent is loaded and body.node("while/body/step/If").subgraphs
    assert loaded.node("while/While").attrs["max_iterations"] == 10


def test_clone_graph_copies_subgraphs_deeply():
    g = build_loop_with_cond()
    copy = clone_graph(g)
    assert structure(copy) == structure(g)
    body, body_copy = (h.node("while/While").subgraphs["body"] for h in (g, copy))
    assert body_copy is not body and body_copy.parent is copy
    assert not {id(n) for n in body} & {id(n) for n in body_copy}


def test_the_verifier_catches_a_subgraph_reading_an_outer_tensor():
    g = build_loop_with_cond()
    body = g.node("while/While").subgraphs["body"]
    body.node("while/body/Add").inputs[0] = g.inputs["n"]  # bypasses the capture
    with pytest.raises(mdsl.GraphError, match="reads n of an enclosing graph"):
        mdsl.ir.verify(g)


def test_the_verifier_catches_a_branch_result_of_the_wrong_type():
    g = build_detector()
    then = g.node("Detector/cond/If").subgraphs["then_branch"]
    out = then.node("Output_0")
    out.inputs[0] = subgraph_params(then)[1]  # w: float32[4,2], not float32[1,3,4,2]
    with pytest.raises(mdsl.GraphError, match=r"result 0: subgraph then_branch gives float32"):
        mdsl.ir.verify(g)


def test_the_verifier_catches_mismatched_parameters_and_counts():
    g = build_loop_with_cond()
    loop = g.node("while/While")
    loop.inputs = loop.inputs[:-1]  # one capture less than the subgraphs take
    with pytest.raises(mdsl.GraphError, match="subgraph body has 4 parameters, the node passes 3"):
        mdsl.ir.verify(g)


def test_summary_and_op_builders_of_control_flow_ops():
    g = build_loop_with_cond()
    assert "While" in g.summary()
    with mdsl.Graph() as h:
        x = h.input("x", (2,))
        with pytest.raises(mdsl.GraphError, match=r"holds subgraphs; build it with mdsl\.cond"):
            mdsl.ops.registry.get_op("If").infer(x.type)
        h.output(x, "y")
