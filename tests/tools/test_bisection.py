"""Pass bisection (`mdsl.bisect`, `mdsl.compare(..., bisect=True)`): a deliberately broken
pass registered in the pipeline is named, with the nodes it touched, their type changes
and the first tensor it got wrong; correct pipelines replay exactly as mdsl.optimize."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

import mdsl
from examples.bert import bert
from examples.resnet_block import build as resnet_block
from mdsl import ops
from mdsl.ir.dtype import DType
from mdsl.ir.rewrite import insert_nodes, new_node, replace_all_uses
from mdsl.passes import PassResult
from mdsl.runtime import compare as compare_module


def flip_add(g: mdsl.Graph) -> PassResult:
    """Broken on purpose: every Add becomes a Sub."""
    adds = [n for n in g if n.op_type == "Add"]
    for node in adds:
        node.op_type = "Sub"
    return PassResult(g, changed=bool(adds), summary=f"flipped {len(adds)}")


def round_exp_through_float16(g: mdsl.Graph) -> PassResult:
    """A precision bug: the result of every Exp goes through float16 and back."""
    exps = [n for n in g if n.op_type == "Exp"]
    for node in exps:
        out = node.output
        half = new_node(
            g, "Cast", [out], {"to": DType.float16}, [out.type.with_dtype("float16")], like=node
        )
        back = new_node(g, "Cast", [half.output], {"to": DType.float32}, [out.type], like=node)
        replace_all_uses(g, out, back.output)
        insert_nodes(g, [half, back])
    return PassResult(g, changed=bool(exps))


def mlp() -> mdsl.Graph:
    with mdsl.Graph("mlp") as g:
        x = g.input("x", ("N", 8))
        with mdsl.scope("Hidden"):
            h = ops.relu(x @ mdsl.param("w", (8, 8)) + mdsl.param("b", (8,)))
        with mdsl.scope("Head"):
            y = ops.sqrt(ops.exp(h * 0.5) + 1.0)
        g.output(y, "y")
    return g


FEEDS = {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)}


def test_a_broken_pass_in_the_pipeline_is_named_with_what_it_touched(restored_passes):
    mdsl.passes.register("flip_add", levels=(2,))(flip_add)
    g = mlp()
    rep = mdsl.compare(g, FEEDS, bisect=True)
    assert not rep.ok and rep.culprit == "flip_add"
    culprit = rep.culprit_step
    assert (culprit.pass_name, culprit.result) == ("flip_add", "FAIL")
    before = rep.steps[: culprit.index]
    assert before[0].pass_name == "(unoptimized)"
    assert all(s.ok is not False and not s.error for s in before)
    assert [s.pass_name for s in rep.steps[1:]] == [
        e.name for e in mdsl.optimize(g, level=2).pass_log[: culprit.index]
    ]  # the steps are exactly mdsl.optimize's pass runs, up to the culprit
    touched = {t.name: (t.mark, t.details) for t in rep.touched}
    assert touched == {"Head/Add": ("~", ("op type: Add -> Sub",))}  # Hidden/Add is in a Gemm
    first = rep.first_mismatch
    assert (first.node, first.op_type) == ("Head/Add", "Sub")
    assert "differs from before the pass (was Add)" in first.note
    [out] = rep.outputs
    assert out.tensor == "y" and not out.ok
    want = mdsl.interpret(g, FEEDS)["y"]
    got = np.sqrt(np.exp(mdsl.interpret(g, FEEDS, capture=True)["Hidden/Relu"] * 0.5) - 1.0)
    assert out.max_abs == pytest.approx(float(np.abs(got - want).max()), rel=1e-5)
    table = rep.table()
    assert "first divergent pass: flip_add" in table
    assert "~ (Sub) Head/Add" in table and "op type: Add -> Sub" in table
    assert max(map(len, table.splitlines())) <= 100
    md = rep.to_markdown()
    assert "| flip_add |" in md and "`Head/Add` (Sub); op type: Add -> Sub" in md


def test_a_precision_bug_shows_the_added_nodes_and_their_dtypes(restored_passes):
    g = mlp()
    rep = mdsl.bisect(
        g, FEEDS, passes=["simplify", round_exp_through_float16, "dce"], rtol=1e-6, atol=0
    )
    assert rep.culprit == "round_exp_through_float16"
    assert rep.culprit_step.index == 2  # simplify ran first and matched
    added = [t for t in rep.touched if t.mark == "+"]
    assert [(t.op_type, t.type_changes) for t in added] == [
        ("Cast", ("output 0: float16[N,8]",)),
        ("Cast", ("output 0: float32[N,8]",)),
    ]
    changed = {t.name: t.details for t in rep.touched if t.mark == "~"}
    assert changed == {"Head/Add": ("input 0: Head/Exp -> Head/Cast_1",)}
    assert rep.first_mismatch.node == "Head/Add"  # Exp itself is unchanged
    assert "float16[N,8]" in rep.table()


def test_correct_pipelines_replay_exactly_and_pass(restored_passes):
    for g, feeds, level in (
        (bert(2, 32, 4), {"x": FEEDS["x"][None, :, :].repeat(4, axis=2)}, 3),
        (resnet_block(channels=4, size=6), None, 3),
    ):
        feeds = feeds or {
            "x": np.random.default_rng(1).standard_normal((2, 4, 6, 6)).astype(np.float32)
        }
        rep = mdsl.bisect(g, feeds, level=level)
        assert rep.ok and rep.culprit is None and rep.first_mismatch is None, rep.table()
        expected = mdsl.optimize(g, level=level)
        assert [s.pass_name for s in rep.steps[1:]] == [e.name for e in expected.pass_log]
        assert [s.changed for s in rep.steps[1:]] == [e.changed for e in expected.pass_log]
        assert "no divergence" in rep.table()
    assert any(s.pass_name == "layout_nhwc" and s.ok for s in rep.steps)  # storage changed


def test_a_pass_that_raises_is_the_culprit(restored_passes):
    def explode(g):
        raise ValueError("boom")

    rep = mdsl.bisect(mlp(), FEEDS, passes=["simplify", explode])
    assert rep.culprit == "explode" and not rep.ok
    assert rep.culprit_step.result == "ERROR"
    assert "pass 'explode' (run after simplify) raised ValueError: boom" in rep.table()


def test_when_the_unoptimized_graph_already_differs_no_pass_is_blamed(monkeypatch):
    def off_by_one(g, feeds):
        values = dict(mdsl.interpret(g, feeds, capture=True))
        name = g.outputs["y"].name
        values[name] = values[name] + 1.0
        return values

    monkeypatch.setitem(compare_module._BACKENDS, "off-by-one", off_by_one)
    rep = mdsl.compare(mlp(), FEEDS, backend="off-by-one", bisect=True)
    assert not rep.ok and rep.culprit is None and len(rep.steps) == 1
    assert "no pass is to blame" in rep.table()


def test_bad_arguments():
    with pytest.raises(mdsl.GraphError, match="list of pass names"):
        mdsl.bisect(mlp(), FEEDS, passes="simplify")
    with pytest.raises(mdsl.GraphError, match="unknown pass 'nope'"):
        mdsl.bisect(mlp(), FEEDS, passes=["nope"])
    with pytest.raises(mdsl.GraphError, match=r"takes an mdsl\.Graph"):
        mdsl.bisect("graph", FEEDS)
    with pytest.raises(mdsl.ExecutionError, match="no compare backend 'nope'"):
        mdsl.compare(mlp(), FEEDS, backend="nope", bisect=True)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_compiled_backend_runs_each_step_as_the_passes_left_it(restored_passes):
    mdsl.passes.register("flip_add", levels=(2,))(flip_add)
    rep = mdsl.compare(mlp(), FEEDS, backend="c", bisect=True)
    assert rep.culprit == "flip_add" and rep.backend == "c"
    assert rep.first_mismatch.node == "Head/Add"
    assert all(s.ok for s in rep.steps[: rep.culprit_step.index] if s.ok is not None)


# -- fusion groups -------------------------------------------------------------------------------
def branches() -> mdsl.Graph:
    """Five independent pointwise chains: five fusion groups; only Branch3 has an Exp."""
    with mdsl.Graph("branches") as g:
        x = g.input("x", (4, 8))
        for i in range(5):
            with mdsl.scope(f"Branch{i}"):
                y = x * float(i + 1) + 1.0
                y = ops.exp(y * 0.1) if i == 3 else ops.tanh(y)
            g.output(y, f"y{i}")
    return g


def plant_fused_exp_bug(monkeypatch) -> None:
    """A planted code-generation bug: a fused kernel holding an Exp stores 1.5x its value
    (the same nodes as single-node kernels are right)."""
    from mdsl.codegen import plan as plan_module

    lower_group = plan_module._lower_whole

    def buggy(ctx, group):
        kernels = lower_group(ctx, group)
        if len(group.nodes) > 1 and any(n.op_type == "Exp" for n in group.nodes):
            for k in kernels:
                k.stores[-1].value = k.stores[-1].value * 1.5
        return kernels

    monkeypatch.setattr(plan_module, "_lower_whole", buggy)


BRANCH_FEEDS = {"x": np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)}


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_fusion_group_that_diverges_once_fused_is_named(monkeypatch):
    plant_fused_exp_bug(monkeypatch)
    g = branches()
    rep = mdsl.compare(g, BRANCH_FEEDS, backend="c", bisect=True)
    assert not rep.ok and rep.culprit == "fuse" and rep.culprit_step.result == "FAIL"
    groups = mdsl.passes.fusion.fusion_groups(mdsl.optimize(g, level=2))
    assert len(groups) == 5
    guilty = next(grp for grp in groups if any(n.op_type == "Exp" for n in grp.nodes))
    named = rep.culprit_group
    assert (named.id, named.kind, named.position, named.total) == (guilty.id, "pointwise", 4, 5)
    assert named.nodes == tuple((n.name, n.op_type) for n in guilty.nodes)
    assert [n for n, _ in named.nodes] == [
        "Branch3/Mul",
        "Branch3/Add",
        "Branch3/Mul_1",
        "Branch3/Exp",
    ]
    steps = rep.group_steps
    assert steps[0].pass_name == "none (all split)" and steps[0].ok is True
    assert len(steps) <= 1 + math.ceil(math.log2(5))  # bisected, not one compile per group
    assert [s.index for s in steps] == list(range(rep.culprit_step.index + 1, steps[-1].index + 1))
    fused = {int(s.pass_name.split()[1]): s.ok for s in steps[1:]}
    assert fused.get(3, True) and not fused.get(4, False)  # 3 groups match, the 4th diverges
    changed = rep.group_divergence
    assert (changed.node, changed.op_type) == ("Branch3/Exp", "Exp")
    want = mdsl.interpret(g, BRANCH_FEEDS, capture=True)["Branch3/Exp"]
    assert changed.max_abs == pytest.approx(float(np.abs(0.5 * want).max()), rel=1e-4)
    table = rep.table()
    assert (
        f"first divergent fusion group: {guilty.id} (pointwise: Mul+Add+Mul+Exp; group 4" in table
    )
    assert "with all 5 fusion groups split the outputs match" in table
    assert max(map(len, table.splitlines())) <= 100
    md = rep.to_markdown()
    assert f"First divergent fusion group: `{guilty.id}` (pointwise): `Branch3/Mul` (Mul)" in md
    assert "| step | fusion groups fused | result | max abs |" in md
    # the interpreter runs no generated code: nothing to find, and no group bisection
    rep = mdsl.compare(g, BRANCH_FEEDS, bisect=True)
    assert rep.ok and rep.group_steps == [] and rep.culprit_group is None


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_pass_that_diverges_with_every_group_split_is_blamed_itself(restored_passes):
    mdsl.passes.register("flip_add_late", levels=(2,), phase="fusion")(flip_add)
    rep = mdsl.compare(branches(), BRANCH_FEEDS, backend="c", bisect=True)
    assert rep.culprit == "flip_add_late" and rep.culprit_group is None
    [split] = rep.group_steps
    assert (split.pass_name, split.result) == ("none (all split)", "FAIL")
    assert "the pass flip_add_late is to blame, not a fusion group" in " ".join(rep.table().split())
