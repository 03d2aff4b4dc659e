"""mdsl.diff: nodes matched by name then by structure; added, removed, changed and renamed
nodes; op counts; fusion groups; a table that fits 100 columns."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ir.rewrite import clone_graph


def mlp(act_name: str = "act", hidden_name: str = "hidden", dtype: str = "float32", axis: int = -1):
    with mdsl.Graph("mlp") as g:
        x = g.input("x", ("N", 8), dtype)
        h = ops.matmul(x, g.const("w1", np.ones((8, 8), dtype)), name=hidden_name)
        a = ops.relu(h, name=act_name)
        g.output(ops.softmax(a, axis=axis), "y")
    return g


def test_a_graph_and_its_copy_are_identical():
    g = mlp()
    d = mdsl.diff(g, clone_graph(g))
    assert d.identical and not d
    assert (d.added, d.removed, d.changed, d.renamed) == ([], [], [], [])
    assert "no structural difference" in d.table()


def test_simplify_shows_removed_nodes_and_the_rewired_output():
    with mdsl.Graph("g") as g:
        x = g.input("x", (2, 3))
        g.output(ops.relu(ops.identity(x) * 1.0), "y")
    d = mdsl.diff(g, mdsl.passes.run(g, ["simplify"]))
    assert d.removed == ["Identity", "Const", "Mul"]
    assert d.added == []
    [change] = d.changed
    assert (change.before, change.after, change.op_type) == ("Relu", "Relu", "Relu")
    assert change.what == ("input 0: Mul -> x",)
    counts = {c.op_type: (c.before, c.after, c.delta) for c in d.op_counts}
    assert counts["Mul"] == (1, 0, -1) and counts["Relu"] == (1, 1, 0)


def test_layout_transformation_shows_conversions_and_storage_formats():
    with mdsl.Graph("conv") as g:
        x = g.input("x", (1, 3, 6, 6))
        g.output(ops.relu(ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), pads=1)), "y")
    d = mdsl.diff(g, mdsl.passes.run(g, ["layout_nhwc"]))
    assert d.added == ["TransData", "TransData_1"]
    assert d.removed == []
    changes = {c.after: c.what for c in d.changed}
    assert changes["Conv"] == (
        "input 0: x -> TransData",
        "output 0: float32[1,4,6,6] -> float32[1,4,6,6] as NHWC",
    )
    assert changes["Output_y"] == ("input 0: Relu -> TransData_1",)
    assert [(c.op_type, c.delta) for c in d.op_counts if c.delta] == [("TransData", 2)]
    assert "as NHWC" in d.table()


def test_renamed_nodes_are_matched_by_structure():
    d = mdsl.diff(mlp(), mlp(act_name="activation", hidden_name="fc"))
    assert d.renamed == [("hidden", "fc"), ("act", "activation")]
    assert (d.added, d.removed, d.changed) == ([], [], [])
    assert d.matches["act"] == "activation"


def test_a_renamed_node_with_other_attrs_is_a_change_not_an_addition():
    with mdsl.Graph("g") as a:
        x = a.input("x", (2, 4))
        a.output(ops.softmax(x, axis=-1, name="probs"), "y")
    with mdsl.Graph("g") as b:
        x = b.input("x", (2, 4))
        b.output(ops.softmax(x, axis=0, name="p"), "y")
    d = mdsl.diff(a, b)
    [change] = d.changed
    assert change.renamed and (change.before, change.after) == ("probs", "p")
    assert change.what == ("attr axis: -1 -> 0",)
    assert d.added == d.removed == []


def test_dtype_changes_are_reported_per_output():
    d = mdsl.diff(mlp(), mlp(dtype="float16"))
    changed = {c.after: c.what for c in d.changed}
    assert changed["x"] == ("output 0: float32[N,8] -> float16[N,8]",)
    assert changed["w1"] == (  # matched by name: its value and type changed
        "attr value: array float32[8,8] -> array float16[8,8]",
        "output 0: float32[8,8] -> float16[8,8]",
    )


def test_renamed_constants_are_matched_by_value():
    with mdsl.Graph("g") as a:
        x = a.input("x", (3,))
        a.output(x + a.const("bias", np.arange(3, dtype=np.float32)), "y")
    with mdsl.Graph("g") as b:
        x = b.input("x", (3,))
        b.output(x + b.const("offset", np.arange(3, dtype=np.float32)), "y")
    d = mdsl.diff(a, b)
    assert d.renamed == [("bias", "offset")]
    assert d.changed == []


def test_fusion_groups_before_and_after():
    g = mlp()
    fused = mdsl.passes.run(g, ["fuse"])
    d = mdsl.diff(g, fused)
    assert d.groups_before == [] and len(d.groups_after) == 2
    assert [(grp.kind, grp.names) for grp in d.groups_added] == [
        ("extern_epilogue", ["hidden", "act"]),
        ("reduction", ["Softmax"]),
    ]
    assert d.changed == []  # group ids are not node changes
    table = d.table()
    assert "fusion groups: 0 -> 2" in table
    assert "+ fg0 extern_epilogue (2 nodes): hidden, act" in table
    assert mdsl.diff(fused, clone_graph(fused)).identical


def test_the_table_fits_100_columns_even_with_long_names():
    @mdsl.layer(name="AVeryLongEncoderLayerNameThatKeepsGoing")
    def deep(x):
        with mdsl.scope("AnotherQuiteLongScopeName"), mdsl.scope("AndAnotherOneBesidesIt"):
            return ops.relu(ops.conv2d(x, mdsl.param("weight_with_a_long_name", (4, 3, 1, 1))))

    with mdsl.Graph("g") as g:
        g.output(deep(g.input("x", ("batch_size", 3, 224, 224))), "y")
    table = mdsl.diff(g, mdsl.optimize(g, level=3)).table()
    lines = table.splitlines()
    assert len(lines) > 10
    assert max(map(len, lines)) <= 100
    assert "..." in table  # long paths are shortened, not wrapped mid-column
    assert max(map(len, mdsl.diff(g, mdsl.optimize(g, level=3)).table(width=80).splitlines())) <= 80


def test_long_sections_are_cut():
    with mdsl.Graph("g") as a:
        y = a.input("x", (4,))
        a.output(y, "y")
    with mdsl.Graph("g") as b:
        y = b.input("x", (4,))
        for _ in range(50):
            y = ops.tanh(y)
        b.output(y, "y")
    d = mdsl.diff(a, b)
    assert len(d.added) == 50
    assert "... and 45 more" in d.table(limit=5)


def test_diff_takes_graphs_only():
    with pytest.raises(mdsl.GraphError, match="second is a str"):
        mdsl.diff(mlp(), "mlp.onnx")
