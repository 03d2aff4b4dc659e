"""`mdsl.compare`: per-node accuracy reports that point at the first node that goes wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.runtime import compare as compare_module

pytestmark = pytest.mark.usefixtures("sandbox")


@mdsl.layer
def shift_back(x):
    return (x + 1000.0) - 1000.0  # float16 keeps 0.5 steps near 1000: x's fraction is lost


def _cancellation_graph():
    with mdsl.Graph("cancel") as g:
        x = g.input("x", ("N",), "float16")
        y = ops.exp(x)
        y = shift_back(y)
        g.output(ops.tanh(y * 2.0), "y")
    return g


FEEDS16 = {"x": np.linspace(-1, 0.3, 64).astype(np.float16)}


def test_a_float16_cancellation_is_found_at_the_node_that_loses_the_precision():
    g = _cancellation_graph()
    same = mdsl.compare(g, FEEDS16)
    assert same.ok and same.first_mismatch is None
    rep = mdsl.compare(g, FEEDS16, reference_dtype="float32")
    assert not rep.ok
    first = rep.first_mismatch
    assert (first.node, first.op_type, first.layer) == ("shift_back/Sub", "Sub", "shift_back")
    assert (first.dtype, first.format, first.shape) == ("float16", "ND", (64,))
    assert first.max_abs >= 0.2 and first.cosine < 0.999
    rows = {r.tensor: r for r in rep.rows}
    assert [r.tensor for r in rep.rows] == [
        "Exp",
        "shift_back/Add",
        "shift_back/Sub",
        "Mul",
        "Tanh",
    ]
    assert rows["Exp"].ok and rows["Exp"].max_abs == 0  # rounding once in float16 either way
    assert rows["shift_back/Add"].ok and rows["shift_back/Add"].max_abs == 0
    assert not rows["Mul"].ok and not rows["Tanh"].ok  # inherited from Sub
    assert rep.reference_dtype == "float32" and rep.mismatches == [first, rows["Mul"], rows["Tanh"]]


def test_the_promoted_reference_does_not_touch_the_graph_it_was_given():
    g = _cancellation_graph()
    before = g.to_json()
    mdsl.compare(g, FEEDS16, reference_dtype="float32")
    assert g.to_json() == before
    promoted = compare_module.promote_graph(g)
    assert {t.dtype for n in promoted for t in n.outputs} == {mdsl.float32}
    assert promoted.node("Const").const_value().dtype == np.float32


def test_casts_and_constants_are_promoted_too():
    with mdsl.Graph() as g:
        x = g.input("x", (8,), "float32")
        h = x.astype("bfloat16") * 3.0  # bfloat16 keeps 8 bits of mantissa
        g.output(h.astype("float32") - x * 3.0, "err")
    feeds = {"x": np.linspace(1, 2, 8, dtype=np.float32) + np.float32(1e-3)}
    promoted = compare_module.promote_graph(g)
    assert promoted.node("Cast").attrs["to"] == mdsl.float32
    assert promoted.node("Const").const_value().dtype == np.float32
    rep = mdsl.compare(g, feeds, reference_dtype="float32", atol=1e-3)
    cast = rep.row("Cast")  # rounded back to bfloat16, the reference's cast is the same
    assert cast.ok and cast.max_abs == 0 and cast.dtype == "bfloat16"
    assert rep.first_mismatch.node == "Mul"  # where bfloat16 arithmetic first rounds
    float64 = mdsl.compare(g, feeds, reference_dtype="float64", atol=1e-3)
    assert float64.first_mismatch.node == "Mul" and float64.reference_dtype == "float64"


def _declare_shift_scale(python_impl):
    @mdsl.op_proto(
        "ShiftScale",
        inputs={"x": "float"},
        outputs={"y": "float"},
        attrs={"shift": mdsl.Attr(float, default=0.5), "scale": mdsl.Attr(float, default=2.0)},
        category="pointwise",
    )
    def shift_scale(x, *, shift, scale):
        return x

    mdsl.register_op_impl(
        "ShiftScale", lambda x, *, shift, scale: (x - shift) * scale, backend="expr"
    )
    mdsl.register_op_impl("ShiftScale", python_impl)
    return shift_scale


@mdsl.layer
def head(x, op):
    return ops.tanh(op(ops.sigmoid(x), shift=0.25))


def test_a_wrong_binding_is_the_first_mismatch_between_python_and_expr():
    wrong = lambda x, *, shift, scale: (x + shift) * scale  # noqa: E731 (a sign error)
    op = _declare_shift_scale(wrong)
    with mdsl.Graph("logic") as g:
        x = g.input("x", ("N", 8))
        g.output(head(ops.exp(x) * 0.5, op), "y")
    feeds = {"x": np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)}
    rep = mdsl.compare(g, feeds, backend="python", reference="expr")
    assert [r.ok for r in rep.rows] == [True, True, True, False, False]
    assert (rep.first_mismatch.node, rep.first_mismatch.layer) == ("head/ShiftScale", "head")
    assert rep.first_mismatch.max_abs == pytest.approx(1.0, rel=1e-6)  # 2 * shift * scale

    mdsl.register_op_impl("ShiftScale", lambda x, *, shift, scale: (x - shift) * scale)
    fixed = mdsl.compare(g, feeds, backend="python", reference="expr")
    assert fixed.ok, fixed.table()


def test_table_fits_100_columns_and_markdown_has_one_row_per_tensor():
    deep = "encoder_layer_with_a_long_name"

    @mdsl.layer(name=deep)
    def layer(x):
        with mdsl.scope("attention_output_projection"):
            return shift_back(x)

    with mdsl.Graph() as g:
        g.output(layer(g.input("x", ("N", 16), "float16")) * 2.0, "y")
    feeds = {"x": np.linspace(0, 1, 64, dtype=np.float16).reshape(4, 16)}
    rep = mdsl.compare(g, feeds, reference_dtype="float32")
    table = rep.table()
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 100, table
    assert lines[0].endswith("3 tensors, 2 mismatched")
    assert lines[1].startswith("first mismatch: encoder_layer_with_a_long_name/")
    assert lines[2].split() == [
        "tensor",
        "op",
        "dtype",
        "shape",
        "max_abs",
        "max_rel",
        "cosine",
        "ok",
    ]
    assert len(lines) == 3 + len(rep.rows)
    sub_line = next(line for line in lines[3:] if " Sub " in line)
    assert sub_line.endswith("FAIL") and "shift_back/Sub" in sub_line and "[4,16]" in sub_line
    assert str(rep) == table
    md = rep.to_markdown().splitlines()
    header = md.index("| tensor | op | dtype | shape | max abs | max rel | cosine | ok |")
    assert len(md) == header + 2 + len(rep.rows)
    assert any(f"`{rep.first_mismatch.tensor}`" in line and "**FAIL**" in line for line in md)


def _simple_graph():
    with mdsl.Graph() as g:
        x = g.input("x", (4,))
        h = ops.exp(x)
        g.output(h * 2.0, "y")
    return g


FEEDS = {"x": np.array([0.0, 0.5, 1.0, 2.0], np.float32)}


def test_a_backend_plugs_in_through_the_registry_and_may_skip_intermediates(monkeypatch):
    def outputs_only(g, feeds):
        return mdsl.interpret(g, feeds)  # graph outputs by output name, nothing else

    monkeypatch.setitem(compare_module._BACKENDS, "outputs-only", outputs_only)
    assert "outputs-only" in compare_module.backends()
    rep = mdsl.compare(_simple_graph(), FEEDS, backend="outputs-only")
    assert rep.ok
    exp, mul = rep.rows
    assert exp.skipped and exp.note == "not captured by the backend" and np.isnan(exp.max_abs)
    assert not mul.skipped and mul.max_abs == 0 and mul.cosine == pytest.approx(1.0)
    assert rep.table().splitlines()[2].endswith("skip")


@pytest.mark.parametrize(
    ("doctor", "tensor", "note", "ok"),
    [
        (lambda v: {k: a for k, a in v.items() if k not in ("y", "Mul")}, "Mul", "not captured", False),
        (lambda v: {**v, "Exp": v["Exp"][:2]}, "Exp", "shape [2] vs reference [4]", False),
        (lambda v: {**v, "Exp": v["Exp"].astype(np.float64)}, "Exp", "dtype float64 vs", False),
        (lambda v: {**v, "Exp": v["Exp"] * (1 + 5e-4)}, "Exp", "", True),
        (lambda v: {**v, "Exp": v["Exp"] * (1 + 5e-3)}, "Exp", "", False),
    ],
)  # fmt: skip
def test_rows_report_missing_misshapen_mistyped_and_inaccurate_tensors(
    monkeypatch, doctor, tensor, note, ok
):
    def doctored(g, feeds):
        return doctor(dict(mdsl.interpret(g, feeds, capture=True)))

    monkeypatch.setitem(compare_module._BACKENDS, "doctored", doctored)
    rep = mdsl.compare(_simple_graph(), FEEDS, backend="doctored")
    row = rep.row(tensor)  # a graph output a backend does not return is a failure
    assert row.note.startswith(note) and row.ok is ok and rep.ok is ok
    assert rep.first_mismatch is (None if ok else row)


def test_special_values_and_error_measures():
    errors = compare_module._errors
    nan, inf = np.nan, np.inf
    a = np.array([1.0, nan, inf, -2.0, 0.0])
    assert errors(a, a.copy(), 1e-3, 1e-5)[3]  # equal NaNs and infinities agree
    max_abs, max_rel, cos, ok = errors(np.array([1.0, 2.0]), np.array([1.0, 2.002]), 1e-3, 0)
    assert ok and max_abs == pytest.approx(0.002) and max_rel == pytest.approx(0.002 / 2.002)
    assert cos == pytest.approx(1.0, abs=1e-6)
    assert not errors(np.array([nan]), np.array([1.0]), 1, 1)[3]
    assert not errors(np.array([1.0]), np.array([inf]), 1, 1)[3]
    assert not errors(np.array([inf]), np.array([-inf]), 1, 1)[3]
    assert errors(np.array([1e-7]), np.array([0.0]), 1e-3, 1e-5)[1] == inf  # rel to a zero
    assert errors(np.array([1.0, 0.0]), np.array([0.0, 1.0]), 1e-3, 1e-5)[2] == 0.0
    assert errors(np.array([1.0, 1.0]), np.array([-1.0, -1.0]), 1e-3, 1e-5)[2] == pytest.approx(-1)
    big = np.array([1e300, 1e300])
    assert errors(big, big, 1e-3, 1e-5)[2] == pytest.approx(1.0)  # no overflow in cosine
    assert errors(np.zeros(0), np.zeros(0), 1e-3, 1e-5) == (0.0, 0.0, 1.0, True)


def test_integer_and_boolean_tensors_are_compared_too():
    with mdsl.Graph() as g:
        x = g.input("x", (5,), "int32")
        g.output(x > 2, "big")
    rep = mdsl.compare(g, {"x": np.arange(5, dtype=np.int32)}, backend="expr")
    assert rep.ok and rep.rows[0].dtype == "bool"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"backend": "cuda"}, mdsl.ExecutionError, r"no compare backend 'cuda'; known: .*expr"),
        ({"reference": "tpu"}, mdsl.ExecutionError, "no compare backend 'tpu'"),
        ({"reference_dtype": "int32"}, mdsl.DTypeError, "float32 or float64, got int32"),
        ({"reference_dtype": "float128"}, mdsl.DTypeError, "unknown dtype"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        mdsl.compare(_simple_graph(), FEEDS, **kwargs)


def test_a_failing_run_says_which_side_failed(monkeypatch):
    with pytest.raises(mdsl.ExecutionError, match=r"backend 'python' failed: .*missing x"):
        mdsl.compare(_simple_graph(), {})
    monkeypatch.setitem(compare_module._BACKENDS, "listy", lambda g, feeds: [1, 2])
    with pytest.raises(mdsl.ExecutionError, match="reference 'listy' returned list"):
        mdsl.compare(_simple_graph(), FEEDS, reference="listy")
    with pytest.raises(mdsl.ExecutionError, match="needs a name and a callable"):
        compare_module.register_backend("broken", None)


def test_the_report_is_plain_data():
    rep = mdsl.compare(_simple_graph(), FEEDS, backend="expr")
    row = rep.row("Exp")
    assert row.op_type == "Exp" and row.shape == (4,) and row.layer == ""
    json.dumps([r.tensor for r in rep.rows])
    with pytest.raises(mdsl.ExecutionError, match="no row for tensor 'nope'"):
        rep.row("nope")
