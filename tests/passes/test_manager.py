"""The pass contract: registry, PassManager, pass_log, failures, mdsl.optimize levels."""

from __future__ import annotations

import pytest

import mdsl
from mdsl import ops
from mdsl.passes import PassError, PassManager, PassResult, manager, register
from tests.passes.checks import assert_preserves_results, op_types


def small_graph() -> mdsl.Graph:
    with mdsl.Graph("small") as g:
        x = g.input("x", ("N", 3))
        dead = ops.exp(x)  # noqa: F841  (dead on purpose)
        y = ops.identity(x) * 1.0
        g.output(y + (g.const("a", 2.0) * 3.0), "y")
    return g


def structure(g):
    return [(n.name, n.op_type, [None if t is None else t.name for t in n.inputs]) for n in g]


def test_run_returns_a_new_graph_and_never_mutates_its_argument():
    g = small_graph()
    before = structure(g)
    g2 = mdsl.passes.run(g, ["simplify", "fold_constants", "dce"])
    assert structure(g) == before
    assert g2 is not g and not set(map(id, g2)) & set(map(id, g))
    assert op_types(g2) == ["Input", "Const", "Add", "Output"]
    assert_preserves_results(g, g2)


def test_pass_log_records_each_pass_with_counts_and_summary():
    g2 = mdsl.passes.run(small_graph(), ["simplify", "fold_constants", "dce", "cse"])
    log = g2.pass_log
    assert [e.name for e in log] == ["simplify", "fold_constants", "dce", "cse"]
    assert [e.changed for e in log] == [True, True, True, False]
    assert [(e.nodes_before, e.nodes_after) for e in log] == [
        (10, 7),  # Identity, Mul and its Const 1.0 pruned
        (7, 7),  # Mul(a, 3) replaced by a Const of the same name
        (7, 4),  # the dead Exp and the two Consts the fold consumed
        (4, 4),
    ]
    assert log[0].summary == "simplified 2 node(s)"
    assert "folded 1 node(s)" in log[1].summary
    assert all(e.seconds >= 0 for e in log)
    assert "simplify" in str(log[0]) and "10 -> 7 nodes" in str(log[0])


def test_pass_log_of_the_source_graph_is_kept():
    g2 = mdsl.passes.run(small_graph(), ["dce"])
    g3 = mdsl.passes.run(g2, ["cse"])
    assert [e.name for e in g3.pass_log] == ["dce", "cse"]
    assert [e.name for e in g2.pass_log] == ["dce"]


def test_unknown_pass_name_lists_the_registered_ones():
    with pytest.raises(mdsl.GraphError, match=r"unknown pass 'nope'.*dce.*fold_constants"):
        mdsl.passes.run(small_graph(), ["nope"])


def test_passes_must_be_a_list():
    with pytest.raises(mdsl.GraphError, match="list of pass names"):
        mdsl.passes.run(small_graph(), "dce")
    with pytest.raises(mdsl.GraphError, match=r"mdsl\.Graph"):
        mdsl.passes.run("graph", ["dce"])


@pytest.mark.usefixtures("restored_passes")
def test_failing_pass_names_itself_and_the_passes_before_it():
    @register("explodes")
    def explodes(g):
        raise ValueError("boom")

    with pytest.raises(PassError) as info:
        mdsl.passes.run(small_graph(), ["simplify", "dce", "explodes", "cse"])
    msg = str(info.value)
    assert msg == "pass 'explodes' (run after simplify, dce) raised ValueError: boom"
    assert isinstance(info.value, mdsl.MdslError)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.usefixtures("restored_passes")
def test_mdsl_errors_inside_a_pass_are_named_too():
    @register("shape_trouble")
    def shape_trouble(g):
        raise mdsl.ShapeError("bad dims")

    with pytest.raises(
        PassError, match=r"pass 'shape_trouble' \(run after no other pass\) ShapeError: bad dims"
    ):
        mdsl.passes.run(small_graph(), ["shape_trouble"])


@pytest.mark.usefixtures("restored_passes")
def test_a_pass_must_return_a_pass_result():
    register("returns_graph")(lambda g: g)
    with pytest.raises(PassError, match="returned Graph, not a PassResult"):
        mdsl.passes.run(small_graph(), ["returns_graph"])


def _reverse_nodes(g):
    g.replace_nodes(list(reversed(g.nodes)))
    return PassResult(g, True, "broke the order")


@pytest.mark.usefixtures("restored_passes")
def test_debug_mode_verifies_after_each_pass():
    register("breaks_order")(_reverse_nodes)
    with pytest.raises(
        PassError, match=r"pass 'breaks_order' \(run after dce\) left an invalid graph"
    ):
        mdsl.passes.run(small_graph(), ["dce", "breaks_order"])
    broken = mdsl.passes.run(small_graph(), ["breaks_order"], debug=False)
    assert broken.pass_log[-1].summary == "broke the order"


def test_debug_follows_the_environment(monkeypatch):
    monkeypatch.setenv("MDSL_DEBUG", "0")
    assert not manager.debug_enabled()
    monkeypatch.setenv("MDSL_DEBUG", "1")
    assert manager.debug_enabled()
    assert not manager.debug_enabled(False)
    assert PassManager([], debug=None).debug


def test_invalid_input_graph_is_reported_before_any_pass():
    g = small_graph()
    g.replace_nodes(list(reversed(g.nodes)))
    with pytest.raises(mdsl.GraphError, match="invalid before any pass ran"):
        mdsl.passes.run(g, ["dce"])


def test_fixed_point_repeats_until_nothing_changes():
    calls = []

    def shrink_once_per_call(g):
        calls.append(len(g))
        return PassResult(g, len(calls) < 3, f"call {len(calls)}")

    g2 = PassManager([shrink_once_per_call], fixed_point=True).run(small_graph())
    assert len(calls) == 3
    assert [e.changed for e in g2.pass_log] == [True, True, False]
    calls.clear()
    PassManager([shrink_once_per_call], fixed_point=True, max_iterations=2).run(small_graph())
    assert len(calls) == 2
    calls.clear()
    PassManager([shrink_once_per_call]).run(small_graph())
    assert len(calls) == 1


def test_unregistered_functions_can_be_run_by_a_manager():
    def tag(g):
        return PassResult(g, False, "looked")

    g2 = PassManager([tag, "dce"]).run(small_graph())
    assert (g2.pass_log[0].name, g2.pass_log[0].summary) == ("tag", "looked")


@pytest.mark.usefixtures("restored_passes")
def test_register_forms_and_validation():
    @register
    def bare(g):
        return PassResult(g, False)

    @register("named", levels=2)
    def something(g):
        return PassResult(g, False)

    assert mdsl.passes.get_pass("bare").levels == frozenset()
    assert mdsl.passes.get_pass("named").levels == frozenset({2})
    assert mdsl.passes.get_pass("named").phase == "rewrite"
    with pytest.raises(mdsl.GraphError, match=r"levels must be ints in 1\.\.3"):
        register("bad", levels=(0,))
    with pytest.raises(mdsl.GraphError, match="levels must be ints"):
        register("bad", levels=(True,))
    with pytest.raises(mdsl.GraphError, match="phase must be one of"):
        register("bad", phase="late")(bare)
    with pytest.raises(mdsl.GraphError, match="non-empty string"):
        register("")


def test_builtin_passes_are_registered_with_their_levels_and_phases():
    infos = mdsl.passes.registered_passes()
    for name in ("fold_constants", "simplify", "cse", "dce"):
        assert infos[name].levels == frozenset({1, 2, 3}) and infos[name].phase == "cleanup"
    for name in ("fold_pad_into_conv", "fold_conv_bn", "fuse_matmul_add"):
        assert infos[name].levels == frozenset({2, 3}) and infos[name].phase == "rewrite"
    assert set(mdsl.passes.PASS_NAMES) <= set(infos)


def _names(groups):
    return [([p.name for p in passes], fixed) for passes, fixed in groups]


def test_optimize_pipeline_by_level():
    cleanup = [
        "fold_constants",
        "simplify",
        "cse",
        "dce",
        "fold_control_flow",
        "prune_control_flow",
    ]
    assert _names(manager.optimize_pipeline(0)) == []
    assert _names(manager.optimize_pipeline(1)) == [(cleanup, True)]
    level2 = _names(manager.optimize_pipeline(2))
    rewrites = [
        "fold_pad_into_conv",
        "fold_conv_bn",
        "fuse_matmul_add",
        "conv3d_as_conv2d",
        "conv_transpose_as_conv",
        "group_norm_as_instance_norm",
        "lower_attention",
        "lower_einsum",
        "hoist_loop_invariants",
    ]
    assert level2[:2] == [(cleanup, True), (rewrites + cleanup, True)]
    phases = {p.name: p.phase for p in mdsl.passes.registered_passes().values()}
    late2 = [name for names, _ in level2[2:] for name in names]
    assert all(phases[n] in ("layout", "fusion") for n in late2)
    level3 = _names(manager.optimize_pipeline(3))
    late3 = [name for names, _ in level3[2:] for name in names]
    assert [phases[n] for n in late3] == sorted(
        (phases[n] for n in late3), key=("layout", "fusion").index
    )


@pytest.mark.usefixtures("restored_passes")
def test_user_passes_join_the_levels_they_name():
    seen = []

    @register("user_level2", levels=(2,))
    def user_level2(g):
        seen.append(g.name)
        return PassResult(g, False)

    mdsl.optimize(small_graph(), level=1)
    assert seen == []
    g2 = mdsl.optimize(small_graph(), level=2)
    assert seen and "user_level2" in [e.name for e in g2.pass_log]


def test_optimize_levels():
    g = small_graph()
    before = structure(g)
    g0 = mdsl.optimize(g, level=0)
    assert structure(g0) == before and g0.pass_log == [] and g0 is not g
    g1 = mdsl.optimize(g, level=1)
    assert op_types(g1) == ["Input", "Const", "Add", "Output"]
    assert structure(g) == before
    assert_preserves_results(g, g1)
    names = [e.name for e in g1.pass_log]
    assert names[:4] == ["fold_constants", "simplify", "cse", "dce"]
    assert not any(e.changed for e in g1.pass_log[-4:]), "stops at a fixed point"


@pytest.mark.parametrize("level", [-1, 4, "2", True, 1.0])
def test_optimize_rejects_bad_levels(level):
    with pytest.raises(mdsl.GraphError, match=r"level must be an int in 0\.\.3"):
        mdsl.optimize(small_graph(), level=level)


def test_a_failure_inside_optimize_names_the_passes_of_earlier_groups(restored_passes):
    @register("late_boom", levels=(2,))
    def late_boom(g):
        raise RuntimeError("late")

    with pytest.raises(PassError) as info:
        mdsl.optimize(small_graph(), level=2)
    assert "(run after fold_constants, simplify, cse, dce, fold_control_flow" in str(info.value)
