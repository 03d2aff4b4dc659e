"""simplify: each row of the table fires where it should, and only there."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ir.dim import Dim
from mdsl.passes.simplify import SIMPLIFY_RULES, represents_exactly, reshape_target
from tests.passes.checks import assert_preserves_results, op_types

F16, F32, F64 = "float16", "float32", "float64"

# (id, input shape, dtype, build(x) -> y, op types of the simplified graph between Input
# and Output; None = "unchanged")
CASES = [
    ("x+0", (2, 3), F32, lambda x: x + 0.0, []),
    ("0+x", (2, 3), F32, lambda x: 0.0 + x, []),
    ("x+zeros(3)", (2, 3), F32, lambda x: x + np.zeros(3, np.float32), []),
    ("x-0", (2, 3), F32, lambda x: x - 0.0, []),
    ("x*1", (2, 3), F32, lambda x: x * 1.0, []),
    ("1*x", (2, 3), F32, lambda x: 1.0 * x, []),
    ("x/1", (2, 3), F32, lambda x: x / 1.0, []),
    ("x**1", (2, 3), F32, lambda x: x**1.0, []),
    ("x+0 int", (4,), "int32", lambda x: x + 0, []),
    ("x*1 f16", (4,), F16, lambda x: x * 1.0, []),
    ("identity", (2, 3), F32, ops.identity, []),
    ("dropout", (2, 3), F32, lambda x: ops.dropout(x, ratio=0.2), []),
    ("cast same", (2, 3), F32, lambda x: x.astype("float32"), []),
    ("cast round trip", (2, 3), F32, lambda x: x.astype(F64).astype(F32), []),
    ("cast f16 via f32", (3,), F16, lambda x: x.astype(F32).astype(F16), []),
    ("transpose pair", (2, 3, 4), F32, lambda x: x.transpose(2, 0, 1).transpose(1, 2, 0), []),
    ("T.T", ("N", 3), F32, lambda x: x.T.T, []),
    ("identity perm", (2, 3), F32, lambda x: x.transpose(0, 1), []),
    ("reshape same", ("N", 6), F32, lambda x: x.reshape(0, 6), []),
    ("reshape chain back", (2, 6), F32, lambda x: x.reshape(12).reshape(3, 4).reshape(2, 6), []),
    (
        "unsqueeze+squeeze",
        ("N", 3),
        F32,
        lambda x: ops.squeeze(ops.unsqueeze(x, axes=[1]), axes=[1]),
        [],
    ),
    (
        "squeeze+unsqueeze",
        (2, 1, 3),
        F32,
        lambda x: ops.unsqueeze(ops.squeeze(x, axes=[1]), axes=[1]),
        [],
    ),
    ("flatten 2d", ("N", 3), F32, lambda x: ops.flatten(x, axis=1), []),
    ("relu relu", (5,), F32, lambda x: ops.relu(ops.relu(x)), ["Relu"]),
    ("abs abs", (5,), F32, lambda x: ops.abs(ops.abs(x)), ["Abs"]),
    ("neg neg", (5,), F32, lambda x: ops.neg(ops.neg(x)), []),
    ("pad 0", (2, 3), F32, lambda x: ops.pad(x, [0, 0, 0, 0]), []),
    ("slice all", ("N", 3), F32, lambda x: x[:, 0:3], []),
    ("expand same", ("N", 3), F32, lambda x: ops.expand(x, [1, 3]), []),
    ("tile ones", (2, 3), F32, lambda x: ops.tile(x, [1, 1]), []),
    ("concat one", (2, 3), F32, lambda x: ops.concat([x], axis=0), []),
    ("where true", (3,), F32, lambda x: ops.where(np.ones(3, bool), x, ops.neg(x)), []),
    ("where false", (3,), F32, lambda x: ops.where(np.zeros(3, bool), ops.neg(x), x), []),
    ("nested", (2, 3), F32, lambda x: ops.identity((x * 1.0).T.T + 0.0), []),
    # rewritten, not removed
    (
        "transpose compose",
        (2, 3, 4),
        F32,
        lambda x: x.transpose(1, 0, 2).transpose(0, 2, 1),
        ["Transpose"],
    ),
    (
        "reshape chain",
        (2, 3, 4),
        F32,
        lambda x: x.reshape(6, 4).reshape(24).reshape(4, 6),
        ["Reshape"],
    ),
    (
        "reshape chain symbolic",
        ("N", 3, 4),
        F32,
        lambda x: x.reshape(0, 12).reshape(0, 2, 6),
        ["Reshape"],
    ),
    (
        "unsqueeze of reshape",
        (2, 3),
        F32,
        lambda x: ops.unsqueeze(x.reshape(6), axes=[0]),
        ["Reshape"],
    ),
    # must stay
    ("x+0 broadcasts x", (3,), F32, lambda x: x + np.zeros((2, 3), np.float32), None),
    ("x+0.5", (3,), F32, lambda x: x + 0.5, None),
    ("x*1 except one", (3,), F32, lambda x: x * np.array([1, 1, 2], np.float32), None),
    ("x*0", (3,), F32, lambda x: x * 0.0, None),
    ("0-x", (3,), F32, lambda x: 0.0 - x, None),
    ("1/x", (3,), F32, lambda x: 1.0 / (ops.abs(x) + 1.0), None),
    ("lossy round trip", (3,), F32, lambda x: x.astype(F16).astype(F32), None),
    ("int round trip via f16", (3,), "int32", lambda x: x.astype(F16).astype("int32"), None),
    ("slice step 2", (4,), F32, lambda x: x[::2], None),
    ("slice reversed", (4,), F32, lambda x: x[::-1], None),
    ("slice part", ("N", 4), F32, lambda x: x[:, 1:], None),
    ("pad 1", (2,), F32, lambda x: ops.pad(x, [1, 0]), None),
    ("tile 2", (2,), F32, lambda x: ops.tile(x, [2]), None),
    ("real transpose", (2, 3), F32, lambda x: x.T, None),
    ("real reshape", (2, 3), F32, lambda x: x.reshape(3, 2), None),
    (
        "where mixed",
        (3,),
        F32,
        lambda x: ops.where(np.array([True, False, True]), x, ops.neg(x)),
        None,
    ),
    ("neg relu", (3,), F32, lambda x: ops.neg(ops.relu(x)), None),
    ("expand grows", (1, 3), F32, lambda x: ops.expand(x, [2, 3]), None),
]


@pytest.mark.parametrize(
    ("shape", "dtype", "build", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_simplify_table(shape, dtype, build, expected):
    with mdsl.Graph("g") as g:
        g.output(build(g.input("x", shape, dtype)), "y")
    g2 = mdsl.passes.run(g, ["simplify", "dce"])
    inner = op_types(g2)[1:-1]
    consts_gone = [t for t in inner if t != "Const"]
    if expected is None:
        assert not g2.pass_log[0].changed, f"unexpected rewrite: {op_types(g2)}"
        assert op_types(g2) == op_types(g)
    else:
        assert consts_gone == expected
        assert g2.pass_log[0].changed
    assert_preserves_results(g, g2)


def test_composed_transpose_has_the_composed_perm():
    with mdsl.Graph("g") as g:
        g.output(g.input("x", (2, 3, 4)).transpose(1, 0, 2).transpose(0, 2, 1), "y")
    g2 = mdsl.passes.run(g, ["simplify"])
    (t,) = [n for n in g2 if n.op_type == "Transpose"]
    assert t.attrs["perm"] == (1, 2, 0)
    assert t.output.shape == (3, 4, 2)


def test_symbolic_reshape_chain_names_no_symbol():
    with mdsl.Graph("g") as g:
        g.output(g.input("x", ("N", 3, 4)).reshape(0, 12).reshape(0, 2, 6), "y")
    g2 = mdsl.passes.run(g, ["simplify"])
    (r,) = [n for n in g2 if n.op_type == "Reshape"]
    assert r.attrs["shape"] == (0, 2, 6)
    assert all(isinstance(d, int) for d in r.attrs["shape"])


def test_replacement_nodes_keep_the_origin_layer_and_source():
    @mdsl.layer
    def block(x):
        return x.transpose(1, 0, 2).transpose(0, 2, 1)

    with mdsl.Graph("g") as g:
        g.output(block(g.input("x", (2, 3, 4))), "y")
    g2 = mdsl.passes.run(g, ["simplify"])
    (t,) = [n for n in g2 if n.op_type == "Transpose"]
    assert t.layer == "block" and t.name.startswith("block/")
    assert t.source == g.node("block/Transpose_1").source


def test_simplifies_inside_subgraphs_and_keeps_outer_reads(region):
    with mdsl.Graph("g") as g:
        x = g.input("x", (3,))
        outer = ops.exp(x)
        g.output(region(g, x, lambda v: ops.identity(outer) * 1.0 + v), "y")
    g2 = mdsl.passes.run(g, ["simplify"])
    body = g2.node("TestRegion").subgraphs["body"]
    assert op_types(body) == ["Add", "Output"]
    assert body.node("Add").inputs[0] is g2.node("Exp").output


def test_the_table_is_data():
    ops_covered = {op for pat, _ in SIMPLIFY_RULES.rules for op in pat.op}
    assert {"Add", "Mul", "Identity", "Transpose", "Reshape", "Cast", "Squeeze"} <= ops_covered
    assert all(callable(fn) for _, fn in SIMPLIFY_RULES.rules)


@pytest.mark.parametrize(
    ("small", "big", "exact"),
    [
        ("float16", "float32", True),
        ("float32", "float64", True),
        ("bfloat16", "float32", True),
        ("float32", "float16", False),
        ("bfloat16", "float16", False),
        ("float16", "bfloat16", False),
        ("int8", "int32", True),
        ("uint8", "int8", False),
        ("int32", "float64", True),
        ("int32", "float32", False),
        ("int16", "float32", True),
        ("bool", "int8", True),
        ("int8", "bool", False),
    ],
)
def test_exact_round_trips(small, big, exact):
    assert represents_exactly(mdsl.DType.of(small), mdsl.DType.of(big)) is exact


def test_reshape_target():
    n = Dim("N")
    assert reshape_target((2, 3), (6,)) == (6,)
    assert reshape_target((n, 3, 4), (n, 12)) == (0, 12)
    assert reshape_target((n, 3), (3, n)) == (3, -1)
    assert reshape_target((n, Dim("M")), (n * Dim("M"),)) == (-1,)
    assert reshape_target((n, Dim("M")), (Dim("M"), n)) is None  # two unknowns
    assert reshape_target((0, 3), (0, 3)) is None  # a real 0 would mean "copy"
