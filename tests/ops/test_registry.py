"""The op registry: `@mdsl.op_proto` prototypes, Attr/In declarations, `mdsl.check`,
implementation bindings, and the errors of bad declarations at node-build time."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl.ops import bindings, registry
from mdsl.ops.registry import Attr, In, parse_dtype_set
from tests.op_sandbox import restored_registries
from tests.user_lines import assert_error_at


@pytest.fixture(autouse=True)
def _sandbox():
    with restored_registries():
        yield


# -- the custom op of API.md, exactly as documented ------------------------------------------
def declare_qlinear_matmul():
    @mdsl.op_proto(
        "QLinearMatMul",
        inputs={
            "a": ["float16", "int8"],
            "b": ["float16", "int8"],
            "scale_a": ["float16", "float32"],
            "scale_b": ["float16", "float32"],
        },
        outputs={"y": ["float32"]},
        attrs={"trans_a": mdsl.Attr(bool, default=False)},
    )
    def qlinear_matmul(a, b, scale_a, scale_b, *, trans_a):  # the InferShape: gets TensorTypes
        m, k = a.shape[::-1] if trans_a else a.shape
        k2, n = b.shape
        mdsl.check(k == k2, f"K of a ({k}) != K of b ({k2})")  # <- qlinear-check
        return mdsl.TensorType((m, n), "float32")

    @mdsl.register_op_impl("QLinearMatMul")  # backend="python": numpy in, numpy out
    def qlinear_matmul_ref(a, b, scale_a, scale_b, *, trans_a):
        a = a.T if trans_a else a
        return (a.astype(np.float32) * scale_a) @ (b.astype(np.float32) * scale_b)

    return qlinear_matmul


def qlinear_graph(trans_a: bool, a_shape, a_dtype="int8") -> mdsl.Graph:
    qlinear_matmul = declare_qlinear_matmul()
    with mdsl.Graph("q") as g:
        a = g.input("a", a_shape, a_dtype)
        b = g.input("b", (3, 5), "int8")
        sa = g.input("sa", (), "float32")
        sb = g.input("sb", (), "float32")
        y = qlinear_matmul(a, b, sa, sb, trans_a=trans_a)
        g.output(y, "y")
    return g


@pytest.mark.parametrize(("trans_a", "a_shape"), [(False, ("M", 3)), (True, (3, "M"))])
def test_qlinear_matmul_builds_infers_and_runs(trans_a, a_shape):
    g = qlinear_graph(trans_a, a_shape)
    node = g.node("QLinearMatMul")
    assert node.attrs == {"trans_a": trans_a}
    assert g.outputs["y"].shape == (mdsl.Dim("M"), 5) and g.outputs["y"].dtype is mdsl.float32
    mdsl.ir.verify(g)
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 8, size=(4, 3) if not trans_a else (3, 4)).astype(np.int8)
    b = rng.integers(-8, 8, size=(3, 5)).astype(np.int8)
    feeds = {"a": a, "b": b, "sa": np.float32(0.5), "sb": np.float32(0.25)}
    got = mdsl.interpret(g, feeds)["y"]
    a_mat = a.T if trans_a else a
    want = np.array(
        [
            [sum(0.5 * a_mat[i, k] * 0.25 * b[k, j] for k in range(3)) for j in range(5)]
            for i in range(4)
        ],
        np.float32,
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.dtype == np.float32


def test_qlinear_default_attr_is_filled_in():
    qlinear_matmul = declare_qlinear_matmul()
    with mdsl.Graph() as g:
        a, b = g.input("a", (2, 3), "float16"), g.input("b", (3, 4), "float16")
        s = g.input("s", (), "float16")
        y = qlinear_matmul(a, b, s, s)
        g.output(y, "y")
    assert g.node("QLinearMatMul").attrs == {"trans_a": False}
    assert y.shape == (2, 4)


def test_qlinear_check_failure_names_node_values_and_user_line():
    qlinear_matmul = declare_qlinear_matmul()
    with mdsl.Graph() as g:
        a, b = g.input("a", (2, 3), "int8"), g.input("b", (4, 5), "int8")
        s = g.input("s", (), "float32")
        with mdsl.scope("Head"), pytest.raises(mdsl.ShapeError) as e:
            qlinear_matmul(a, b, s, s, trans_a=False)  # <- qlinear-call
        g.output(a, "y")
    assert_error_at(
        e.value, __file__, "qlinear-call", node="Head/QLinearMatMul", op_type="QLinearMatMul"
    )
    assert e.value.message == "K of a (3) != K of b (4)"


def test_qlinear_dtype_outside_the_list():
    qlinear_matmul = declare_qlinear_matmul()
    with mdsl.Graph() as g:
        a, b = g.input("a", (2, 3), "float32"), g.input("b", (3, 5), "int8")
        s = g.input("s", (), "float32")
        with pytest.raises(mdsl.DTypeError) as e:
            qlinear_matmul(a, b, s, s, name="qmm")  # <- qlinear-dtype
        g.output(a, "y")
    assert_error_at(e.value, __file__, "qlinear-dtype", node="qmm", op_type="QLinearMatMul")
    assert e.value.message == "input 'a' is float32, expected one of float16, int8"


@pytest.mark.parametrize(
    ("attrs", "error", "message"),
    [
        ({"trans_a": 1}, mdsl.GraphError, "attr 'trans_a' expects bool, got 1"),
        ({"trans_a": "yes"}, mdsl.GraphError, "attr 'trans_a' expects bool, got 'yes'"),
        (
            {"transpose": True},
            mdsl.GraphError,
            "unknown attr transpose (known: trans_a) (did you mean `trans_a=`?)",
        ),
    ],
)
def test_qlinear_bad_attrs(attrs, error, message):
    qlinear_matmul = declare_qlinear_matmul()
    with mdsl.Graph() as g:
        a, b = g.input("a", (2, 3), "int8"), g.input("b", (3, 5), "int8")
        s = g.input("s", (), "float32")
        with pytest.raises(error) as e:
            qlinear_matmul(a, b, s, s, **attrs)  # <- qlinear-attrs
        g.output(a, "y")
    assert_error_at(
        e.value, __file__, "qlinear-attrs", node="QLinearMatMul", op_type="QLinearMatMul"
    )
    assert e.value.message == message


def test_builder_carries_the_prototype():
    qlinear_matmul = declare_qlinear_matmul()
    opdef = qlinear_matmul.opdef
    assert qlinear_matmul.op_type == "QLinearMatMul" and registry.get_op("QLinearMatMul") is opdef
    assert [s.name for s in opdef.inputs] == ["a", "b", "scale_a", "scale_b"]
    assert opdef.inputs[0].allowed == {mdsl.float16, mdsl.int8}
    assert opdef.outputs[0].allowed == {mdsl.float32}
    assert list(opdef.attrs) == ["trans_a"] and opdef.attrs["trans_a"].default is False
    assert qlinear_matmul.__name__ == "qlinear_matmul"
    assert bindings.get_binding("QLinearMatMul", "python").fn.__name__ == "qlinear_matmul_ref"


def test_inputs_by_keyword():
    qlinear_matmul = declare_qlinear_matmul()
    with mdsl.Graph() as g:
        a, b = g.input("a", (2, 3), "int8"), g.input("b", (3, 5), "int8")
        s = g.input("s", (), "float32")
        y = qlinear_matmul(a, b, scale_b=s, scale_a=s, trans_a=False)
        g.output(y, "y")
    assert [t.name for t in g.node("QLinearMatMul").inputs] == ["a", "b", "s", "s"]


def test_too_many_inputs():
    qlinear_matmul = declare_qlinear_matmul()
    with mdsl.Graph() as g:
        a = g.input("a", (2, 3), "int8")
        with pytest.raises(mdsl.GraphError) as e:
            qlinear_matmul(a, a, a, a, a)  # <- too-many
        g.output(a, "y")
    assert_error_at(e.value, __file__, "too-many", node="QLinearMatMul", op_type="QLinearMatMul")
    assert e.value.message == (
        "takes 4 inputs (a, b, scale_a, scale_b), got 5 positional arguments; "
        "attrs are keyword-only: pass the trans_a as `trans_a=`"
    )


# -- optional and variadic inputs ---------------------------------------------------------------
def declare_dense():
    @mdsl.op_proto(
        "DenseTest",
        inputs={"x": "float", "w": "float", "bias": mdsl.In(["float32"], optional=True)},
        outputs={"y": "float"},
    )
    def dense(x, w, bias):
        if bias is not None:
            mdsl.check(bias.shape == (w.shape[1],), f"bias {bias.shape} does not fit {w.shape}")
        return mdsl.TensorType((x.shape[0], w.shape[1]), x.dtype)

    return dense


def test_optional_input_may_be_left_out():
    dense = declare_dense()
    with mdsl.Graph() as g:
        x, w = g.input("x", ("N", 3)), g.input("w", (3, 2))
        y1 = dense(x, w)
        y2 = dense(x, w, g.input("b", (2,)))
        y3 = dense(x, w, bias=None)
        g.output(y1 + y2 + y3, "y")
    assert g.node("DenseTest").inputs[2] is None
    assert g.node("DenseTest_1").inputs[2].name == "b"
    assert g.node("DenseTest_2").inputs[2] is None
    assert y1.shape == (mdsl.Dim("N"), 2)
    mdsl.ir.verify(g)


def test_optional_input_is_still_type_checked():
    dense = declare_dense()
    with mdsl.Graph() as g:
        x, w = g.input("x", (2, 3)), g.input("w", (3, 2))
        with pytest.raises(
            mdsl.DTypeError, match="input 'bias' is float16, expected one of float32"
        ):
            dense(x, w, g.input("b16", (2,), "float16"))
        with pytest.raises(mdsl.ShapeError, match=r"bias \(3,\) does not fit \(3, 2\)"):
            dense(x, w, g.input("b3", (3,)))
        with pytest.raises(mdsl.GraphError, match="missing required input 'w'"):
            dense(x)
        g.output(x, "y")


def declare_sum_all():
    @mdsl.op_proto(
        "SumAll",
        inputs={"xs": mdsl.In("numeric", variadic=True)},
        outputs={"y": "numeric"},
        attrs={"scale": Attr(float, default=1.0)},
    )
    def sum_all(*xs, scale):
        for x in xs[1:]:
            mdsl.check(x.shape == xs[0].shape, f"shape {x.shape} != {xs[0].shape}")
        return xs[0]

    mdsl.register_op_impl("SumAll", lambda *xs, scale: sum(xs) * xs[0].dtype.type(scale))
    return sum_all


def test_variadic_input_takes_a_list():
    sum_all = declare_sum_all()
    with mdsl.Graph() as g:
        xs = [g.input(f"x{i}", (2,)) for i in range(3)]
        y = sum_all(xs, scale=2.0)
        z = sum_all([y])  # one is enough
        g.output(z, "y")
    assert [t.name for t in g.node("SumAll").inputs] == ["x0", "x1", "x2"]
    feeds = {f"x{i}": np.full(2, i + 1, np.float32) for i in range(3)}
    np.testing.assert_array_equal(mdsl.interpret(g, feeds)["y"], np.full(2, 12, np.float32))
    back = mdsl.Graph.from_json(g.to_json())
    assert len(back.node("SumAll").inputs) == 3


@pytest.mark.parametrize(
    ("arg", "error", "message"),
    [
        ([], mdsl.GraphError, "input 'xs' takes a non-empty list of tensors"),
        ("x0", mdsl.GraphError, "input 'xs' takes a non-empty list of tensors"),
        (["x0", "wrong"], mdsl.ShapeError, r"shape \(3,\) != \(2,\)"),
        (["x0", "bool"], mdsl.DTypeError, "input 'xs' is bool"),
    ],
)
def test_variadic_input_errors(arg, error, message):
    sum_all = declare_sum_all()
    with mdsl.Graph() as g:
        tensors = {
            "x0": g.input("x0", (2,)),
            "wrong": g.input("wrong", (3,)),
            "bool": g.input("bool", (2,), "bool"),
        }
        value = [tensors[a] for a in arg] if isinstance(arg, list) else tensors[arg]
        with pytest.raises(error) as e:
            sum_all(value)  # <- variadic-call
        g.output(tensors["x0"], "y")
    assert_error_at(e.value, __file__, "variadic-call", node="SumAll", op_type="SumAll")
    assert e.value.message == message or __import__("re").search(message, e.value.message)


def test_variadic_outputs_return_a_tuple():
    @mdsl.op_proto(
        "Halves",
        inputs={"x": "float"},
        outputs={"parts": mdsl.In("float", variadic=True)},
        attrs={"n": Attr(int, default=2)},
    )
    def halves(x, *, n):
        return tuple(mdsl.TensorType((x.shape[0] // n,), x.dtype) for _ in range(n))

    with mdsl.Graph() as g:
        parts = halves(g.input("x", (6,)), n=3)
        one = halves(g.input("z", (4,)), n=1)
        for i, p in enumerate(parts):
            g.output(p, f"p{i}")
        g.output(one[0], "one")
    assert isinstance(parts, tuple) and [p.name for p in parts] == [
        "Halves",
        "Halves:1",
        "Halves:2",
    ]
    assert [p.shape for p in parts] == [(2,)] * 3
    assert isinstance(one, tuple) and len(one) == 1


# -- bad declarations fail when the node is built ---------------------------------------------
def test_infer_returning_a_dtype_outside_the_output_list():
    @mdsl.op_proto("BadOut", inputs={"x": "any"}, outputs={"y": ["float32"]})
    def bad_out(x):
        return x  # an int8 input gives an int8 output: not allowed

    with mdsl.Graph() as g:
        x = g.input("x", (2,), "int8")
        with pytest.raises(mdsl.DTypeError) as e:
            bad_out(x)  # <- bad-out
        ok = bad_out(g.input("f", (2,)))
        g.output(ok, "y")
    assert_error_at(e.value, __file__, "bad-out", node="BadOut", op_type="BadOut")
    assert e.value.message == "output 'y' would be int8, not one of float32"


def test_infer_raising_a_python_exception():
    @mdsl.op_proto("Crashy", inputs={"x": "any"}, outputs={"y": "any"})
    def crashy(x):
        return {}["missing"]

    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with mdsl.scope("L"), pytest.raises(mdsl.GraphError) as e:
            crashy(x)  # <- crashy
        g.output(x, "y")
    assert_error_at(e.value, __file__, "crashy", node="L/Crashy", op_type="Crashy")
    assert e.value.message == "InferShape of 'Crashy' raised KeyError: 'missing'"
    assert isinstance(e.value.__cause__, KeyError) or e.value.__cause__ is None


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (None, "InferShape of 'Weird' must return TensorType(s), got None"),
        ((2, 3), "InferShape of 'Weird' must return TensorType(s), got 2"),
        ("two", "InferShape of 'Weird' returned 2 types for 1 outputs"),
    ],
)
def test_infer_returning_the_wrong_thing(result, message):
    @mdsl.op_proto("Weird", inputs={"x": "any"}, outputs={"y": "any"})
    def weird(x):
        return (x, x) if result == "two" else result

    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.GraphError) as e:
            weird(x)  # <- weird
        g.output(x, "y")
    assert_error_at(e.value, __file__, "weird", node="Weird", op_type="Weird")
    assert e.value.message == message


def test_required_attr_and_choices():
    @mdsl.op_proto(
        "Mode",
        inputs={"x": "float"},
        outputs={"y": "float"},
        attrs={
            "alpha": Attr(float, required=True),
            "mode": Attr(str, default="none", choices=("none", "tanh")),
            "axes": Attr([int], default=(0,)),
        },
    )
    def mode_op(x, *, alpha, mode, axes):
        return x

    with mdsl.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(mdsl.GraphError) as e:
            mode_op(x)  # <- mode-missing
        assert_error_at(e.value, __file__, "mode-missing", node="Mode", op_type="Mode")
        assert e.value.message == "missing required attr 'alpha'"
        with pytest.raises(
            mdsl.GraphError, match=r"attr 'mode' must be one of \('none', 'tanh'\), got 'relu'"
        ):
            mode_op(x, alpha=1.0, mode="relu")
        y = mode_op(x, alpha=np.int64(2), axes=[np.int32(0)])
        g.output(y, "y")
    node = g.node("Mode")
    assert node.attrs == {"alpha": 2.0, "mode": "none", "axes": (0,)}
    assert type(node.attrs["alpha"]) is float and type(node.attrs["axes"][0]) is int


# -- declaration-time errors ------------------------------------------------------------------
def test_declaration_errors():
    with pytest.raises(mdsl.GraphError, match="op type must be an identifier, got 'Bad Op'"):
        mdsl.op_proto("Bad Op", inputs={}, outputs={"y": "any"})
    with pytest.raises(mdsl.DTypeError, match="unknown dtype 'float7'"):
        mdsl.op_proto("BadDtype", inputs={"x": ["float7"]}, outputs={"y": "any"})(lambda x: x)
    with pytest.raises(mdsl.GraphError, match="unknown category 'magic'"):
        mdsl.op_proto("BadCat", inputs={}, outputs={"y": "any"}, category="magic")(lambda: None)
    with pytest.raises(mdsl.GraphError, match="unsupported attr type"):
        Attr(dict)
    with pytest.raises(mdsl.GraphError, match="unsupported attr type"):
        Attr([bool, int])
    assert not registry.has_op("BadDtype") and not registry.has_op("BadCat")


def test_unknown_op_lookup():
    with pytest.raises(
        mdsl.GraphError, match=r"unknown op type 'Nope'; register it with @mdsl\.op_proto"
    ):
        registry.get_op("Nope")
    assert not registry.has_op("Nope") and "Nope" not in registry.all_ops()


def test_redeclaring_an_op_replaces_it():
    @mdsl.op_proto("Twice", inputs={"x": "any"}, outputs={"y": "any"})
    def first(x):
        return x

    @mdsl.op_proto("Twice", inputs={"x": "any"}, outputs={"y": "any"})
    def second(x):
        return mdsl.TensorType((*x.shape, 1), x.dtype)

    assert registry.get_op("Twice") is second.opdef
    with mdsl.Graph() as g:
        y = first(g.input("x", (2,)))  # an older builder records "Twice" by the current rule
        g.output(y, "y")
    assert y.shape == (2, 1) and y.producer.op_type == "Twice"
    mdsl.ir.verify(g)


def test_op_outside_a_graph():
    qlinear_matmul = declare_qlinear_matmul()
    with pytest.raises(mdsl.GraphError) as e:
        qlinear_matmul(None, None, None, None)  # <- qlinear-outside
    assert_error_at(e.value, __file__, "qlinear-outside", node=None, op_type=None)
    assert "op QLinearMatMul used outside a graph" in e.value.message


# -- Attr ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        (int, 3, 3),
        (int, np.int16(3), 3),
        (int, mdsl.Dim("N"), mdsl.Dim("N")),
        (float, 2, 2.0),
        (float, np.float16(0.5), 0.5),
        (float, float("inf"), float("inf")),
        (bool, np.bool_(True), True),
        (str, "tanh", "tanh"),
        (mdsl.DType, "float16", mdsl.float16),
        (mdsl.DType, np.int8, mdsl.int8),
        ([int], [1, np.int64(2)], (1, 2)),
        ([int], (), ()),
        ([float], (1, 2.5), (1.0, 2.5)),
        ([str], ["a", "b"], ("a", "b")),
    ],
)
def test_attr_coercion(kind, value, expected):
    out = Attr(kind).coerce("a", value)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (int, True),
        (int, 1.0),
        (int, "1"),
        (int, None),
        (float, True),
        (float, "1.0"),
        (bool, 1),
        (bool, None),
        (str, 1),
        (str, b"x"),
        ([int], 1),
        ([int], "12"),
        ([int], [1, 2.0]),
        ([int], [True]),
        ([float], [1, "x"]),
        ([str], "ab"),
        (np.ndarray, [1, 2]),
    ],
)
def test_attr_rejects(kind, value):
    with pytest.raises(mdsl.GraphError, match="attr 'a' expects"):
        Attr(kind).coerce("a", value)


def test_attr_dtype_rejection_says_which_attr():
    with pytest.raises(mdsl.MdslError, match="unknown dtype 'float7'"):
        Attr(mdsl.DType).coerce("to", "float7")


def test_attr_defaults_and_repr():
    assert Attr(int).required and repr(Attr(int)) == "Attr(int)"
    assert not Attr(int, default=None).required
    assert Attr(int, default=None).coerce("a", None) is None
    assert repr(Attr([int], default=(1, 1))) == "Attr(list[int], default=(1, 1))"
    assert Attr(float, default=0.5, required=True).required
    arr = np.ones(2)
    assert Attr(np.ndarray).coerce("a", arr) is arr


def test_dtype_sets():
    assert parse_dtype_set("float") == {mdsl.float16, mdsl.bfloat16, mdsl.float32, mdsl.float64}
    assert parse_dtype_set(["int8", "bool"]) == {mdsl.int8, mdsl.bool_}
    assert parse_dtype_set(mdsl.int64) == {mdsl.int64}
    assert parse_dtype_set(["float16", "int"]) == {
        mdsl.float16,
        mdsl.int8,
        mdsl.uint8,
        mdsl.int16,
        mdsl.int32,
        mdsl.int64,
        mdsl.uint16,
        mdsl.uint32,
        mdsl.uint64,
    }
    assert parse_dtype_set("any") == set(mdsl.DType)
    storage = {d for d in mdsl.DType if d.is_storage}
    assert parse_dtype_set("numeric") == set(mdsl.DType) - {mdsl.bool_} - storage
    assert In().dtypes == "any" and not In().optional and not In().variadic


# -- mdsl.check ----------------------------------------------------------------------------------
def test_check():
    mdsl.check(True, "never")
    with pytest.raises(mdsl.ShapeError, match=r"^K differs$"):
        mdsl.check(False, "K differs")
    with pytest.raises(mdsl.DTypeError, match=r"^bad dtype$"):
        mdsl.check(0, "bad dtype", mdsl.DTypeError)


# -- implementation bindings ---------------------------------------------------------------------
def test_register_op_impl_as_call_and_decorator_and_replacement():
    def first(x):
        return x

    def second(x):
        return x * 2

    assert mdsl.register_op_impl("Bound", first) is first
    assert bindings.get_binding("Bound", "python").fn is first
    decorated = mdsl.register_op_impl("Bound")(second)
    assert decorated is second and bindings.get_binding("Bound", "python").fn is second
    assert set(bindings.bindings_of("Bound")) == {"python"}
    assert bindings.get_binding("Bound", "expr") is None


def test_register_op_impl_errors():
    with pytest.raises(mdsl.GraphError, match="unknown backend 'cuda' for Bound"):
        mdsl.register_op_impl("Bound", lambda x: x, backend="cuda")
    with pytest.raises(mdsl.GraphError, match="'c' binding of Bound needs source= and symbol="):
        mdsl.register_op_impl("Bound", backend="c")
    assert bindings.bindings_of("Bound") == {}


def test_rebinding_changes_no_graph():
    sum_all = declare_sum_all()
    with mdsl.Graph() as g:
        g.output(sum_all([g.input("x", (2,))]), "y")
    before = g.to_json()
    feeds = {"x": np.ones(2, np.float32)}
    np.testing.assert_array_equal(mdsl.interpret(g, feeds)["y"], np.ones(2, np.float32))
    mdsl.register_op_impl("SumAll", lambda *xs, scale: xs[0] * np.float32(3))
    np.testing.assert_array_equal(mdsl.interpret(g, feeds)["y"], np.full(2, 3, np.float32))
    assert g.to_json() == before


def test_the_sandbox_restores_the_registry():
    # runs after other tests of this module declared ops: none of them survived
    leftovers = {"QLinearMatMul", "DenseTest", "SumAll", "Halves", "BadOut", "Crashy", "Weird"}
    assert not leftovers & set(registry.all_ops())
    assert bindings.get_binding("SumAll", "python") is None
