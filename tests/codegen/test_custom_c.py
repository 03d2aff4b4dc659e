"""Custom ops bound to C (`register_op_impl(op, backend="c", source=/library=, symbol=)`),
run inside compiled graphs and checked against plain numpy written here."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import mdsl
from mdsl.codegen import kir
from mdsl.codegen.custom_c import HEADER_FILE, header_text
from mdsl.codegen.plan import build_plan
from tests.op_sandbox import restored_registries

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

SWISH_C = """
#include <math.h>
static float swish_one(float v) { return v / (1.0f + expf(-v)); }
int swish_f32(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs, int n_outputs,
              const double *attrs, int n_attrs) {
    if (n_inputs != 1 || n_outputs != 1 || inputs[0].dtype != MDSL_DTYPE_FLOAT32) return 1;
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    for (int64_t i = 0; i < inputs[0].size; i++) y[i] = swish_one(x[i]);
    return 0;
}
"""


def swish_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / (1.0 + np.exp(-x))


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One build cache for this module's tests (none of them damages cache entries)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def sandbox(module_cache, monkeypatch):
    monkeypatch.setenv("MDSL_CACHE_DIR", str(module_cache))
    with restored_registries():
        yield


def declare_swish(category="pointwise"):
    @mdsl.op_proto("Swish", inputs={"x": "float32"}, outputs={"y": "float32"}, category=category)
    def swish(x):
        return x

    return swish


def swish_graph(swish, shape=("N", 5), name="swish_graph"):
    with mdsl.Graph(name) as g:
        x = g.input("x", shape)
        g.output(swish(x * 2.0) + 1.0, "y")
    return g


def kinds(exe) -> dict[str, str]:
    return {node: k.kind for k in exe.kernels for node in k.nodes}


def test_swish_from_c_source_matches_numpy_and_is_one_kernel():
    swish = declare_swish()
    mdsl.register_op_impl("Swish", backend="c", source=SWISH_C, symbol="swish_f32")
    exe = mdsl.compile(swish_graph(swish), backend="c")
    x = np.random.default_rng(0).normal(0, 3, (7, 5)).astype(np.float32)
    got = exe(x=x)["y"]
    np.testing.assert_allclose(got, swish_reference(2 * x) + 1, rtol=1e-6, atol=1e-6)
    assert kinds(exe)["Swish"] == "custom C op"
    (call,) = [k for k in exe.plan.kernels if isinstance(k, kir.CustomCall)]
    assert call.symbol == "swish_f32" and call.function.startswith("mdsl_cop_")
    assert call.output_types == [(mdsl.float32, (mdsl.Dim("dim0"), 5))]  # N, read at run time
    x3 = x[:3] * 0.5
    np.testing.assert_allclose(exe(x=x3)["y"], swish_reference(2 * x3) + 1, rtol=1e-6, atol=1e-6)
    assert list(exe.variants()) == [()]  # one symbolic build serves every N
    source = next(iter(exe.sources.values()))
    assert source.count("swish_one(float v)") == 1  # the user's source, once


def test_c_binding_wins_over_expr_binding_and_splits_the_fused_group():
    swish = declare_swish()
    wrong = lambda x: x * 100.0  # noqa: E731 - would be fused if it were chosen
    mdsl.register_op_impl("Swish", wrong, backend="expr")
    g = swish_graph(swish)
    feeds = {"x": np.linspace(-4, 4, 10, dtype=np.float32).reshape(2, 5)}
    fused = mdsl.compile(g, backend="c")
    np.testing.assert_allclose(fused(feeds)["y"], 200 * feeds["x"] + 1, rtol=1e-6)
    assert len(fused.kernels) == 1 and kinds(fused)["Swish"] == "pointwise"

    mdsl.register_op_impl("Swish", backend="c", source=SWISH_C, symbol="swish_f32")
    exe = mdsl.compile(g, backend="c")
    expected = swish_reference(2 * feeds["x"]) + 1
    np.testing.assert_allclose(exe(feeds)["y"], expected, rtol=1e-6, atol=1e-6)
    assert kinds(exe) == {"Mul": "pointwise", "Swish": "custom C op", "Add": "pointwise"}


def test_targets_without_c_keep_the_other_bindings():
    swish = declare_swish(category="opaque")
    mdsl.register_op_impl("Swish", lambda x: swish_reference(x).astype(np.float32))
    mdsl.register_op_impl("Swish", backend="c", source=SWISH_C, symbol="swish_f32")
    static = mdsl.optimize(swish_graph(swish, shape=(2, 5)))
    default = [type(k) for k in build_plan(static).kernels]
    assert kir.CustomCall not in default and kir.Callback in default
    assert kir.CustomCall in [type(k) for k in build_plan(static, c_bindings=True).kernels]


def test_two_graphs_with_one_op_and_two_sources_with_one_symbol_all_work():
    swish = declare_swish()
    mdsl.register_op_impl("Swish", backend="c", source=SWISH_C, symbol="swish_f32")

    @mdsl.op_proto("Negate", inputs={"x": "float32"}, outputs={"y": "float32"})
    def negate(x):
        return x

    # the same entry point name, another body (helpers of one graph need distinct names)
    negate_c = SWISH_C.replace("v / (1.0f + expf(-v))", "-v").replace("swish_one", "neg_one")
    mdsl.register_op_impl("Negate", backend="c", source=negate_c, symbol="swish_f32")
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    with mdsl.Graph("both") as g:
        t = g.input("x", (2, 3))
        g.output(negate(swish(t)), "y")
    first = mdsl.compile(g, backend="c")
    second = mdsl.compile(swish_graph(swish, shape=(2, 3), name="other"), backend="c")
    np.testing.assert_allclose(first(x=x)["y"], -swish_reference(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(second(x=x)["y"], swish_reference(2 * x) + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(first(x=x)["y"], -swish_reference(x), rtol=1e-6, atol=1e-7)


SHAPES_C = """
int describe(const mdsl_tensor *in, int n_in, mdsl_tensor *out, int n_out,
             const double *attrs, int n_attrs) {
    int64_t *info = (int64_t *)out[0].data;
    int64_t k = 0;
    info[k++] = n_in; info[k++] = n_out; info[k++] = n_attrs;
    for (int i = 0; i < n_in; i++) {
        info[k++] = in[i].dtype; info[k++] = in[i].ndim; info[k++] = in[i].size;
        for (int d = 0; d < in[i].ndim; d++) info[k++] = in[i].shape[d];
        info[k++] = in[i].data == 0;
    }
    info[k++] = out[1].dtype; info[k++] = out[1].ndim;
    info[k++] = (int64_t)(attrs[0] * 10); info[k++] = (int64_t)attrs[1];
    info[k++] = (int64_t)attrs[2]; info[k++] = attrs[3] != attrs[3];  /* NaN: a str attr */
    while (k < out[0].size) info[k++] = -7;
    double *total = (double *)out[1].data;
    const int32_t *a = (const int32_t *)in[0].data;
    total[0] = attrs[0];
    for (int64_t i = 0; i < in[0].size; i++) total[0] += a[i];
    return 0;
}
"""


def test_tensor_records_and_attrs_follow_the_documented_convention():
    attrs = {
        "scale": mdsl.Attr(float, default=1.5),
        "count": mdsl.Attr(int, default=3),
        "flag": mdsl.Attr(bool, default=True),
        "mode": mdsl.Attr(str, default="x"),
    }
    inputs = {"a": "int32", "b": mdsl.In("float16", optional=True), "c": "float32"}

    @mdsl.op_proto(
        "Describe", inputs=inputs, outputs={"info": "int64", "total": "float64"}, attrs=attrs
    )
    def describe(a, b, c, *, scale, count, flag, mode):
        return mdsl.TensorType((24,), "int64"), mdsl.TensorType((), "float64")

    mdsl.register_op_impl("Describe", backend="c", source=SHAPES_C, symbol="describe")
    with mdsl.Graph("describe") as g:
        a, c = g.input("a", (2, 3), "int32"), g.input("c", (4,))
        info, total = describe(a, None, c, scale=2.5, count=7, flag=False)
        g.output(info, "info")
        g.output(total, "total")
    got = mdsl.compile(g, backend="c")(
        a=np.arange(6, dtype=np.int32).reshape(2, 3), c=np.ones(4, np.float32)
    )
    codes = {"int32": 4, "float32": 8, "float64": 9}
    expected = [3, 2, 4, codes["int32"], 2, 6, 2, 3, 0, -1, 0, 0, 1, codes["float32"], 1, 4, 4, 0]
    expected += [codes["float64"], 0, 25, 7, 0, 1]
    assert got["info"].tolist() == expected
    assert got["total"].shape == () and got["total"] == 2.5 + 15


ATTRS_C = """
int echo_attrs(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs, int n_outputs,
               const double *attrs, int n_attrs) {
    double *out = (double *)outputs[0].data;
    if (n_attrs > outputs[0].size) return 1;
    for (int i = 0; i < outputs[0].size; i++) out[i] = i < n_attrs ? attrs[i] : 99.0;
    return 0;
}
"""


def test_list_attrs_follow_the_scalar_attrs_as_length_and_elements():
    attrs = {
        "ids": mdsl.Attr([int], default=None),
        "scale": mdsl.Attr(float, default=1.5),
        "weights": mdsl.Attr([float], default=None),
        "names": mdsl.Attr([str], default=()),
        "none": mdsl.Attr([int], default=None),
    }

    @mdsl.op_proto("EchoAttrs", inputs={"x": "float32"}, outputs={"y": "float64"}, attrs=attrs)
    def echo(x, *, ids, scale, weights, names, none):
        return mdsl.TensorType((12,), "float64")

    mdsl.register_op_impl("EchoAttrs", backend="c", source=ATTRS_C, symbol="echo_attrs")
    with mdsl.Graph("echo") as g:
        g.output(echo(g.input("x", (1,)), ids=(4, -2), weights=(0.5,), names=("a",)), "y")
    got = mdsl.compile(g, backend="c")(x=np.zeros(1, np.float32))["y"]
    nan = np.nan  # ids, scale, weights, names, none; then ids, weights, none as lists
    np.testing.assert_array_equal(got, [nan, 1.5, nan, nan, nan, 2, 4, -2, 1, 0.5, -1, 99])


def test_a_failing_c_function_raises_an_execution_error_naming_the_node():
    swish = declare_swish()
    failing = SWISH_C.replace("return 0;\n}", "return x[0] < 0 ? 5 : 0;\n}")
    mdsl.register_op_impl("Swish", backend="c", source=failing, symbol="swish_f32")
    exe = mdsl.compile(swish_graph(swish), backend="c")
    assert exe(x=np.ones((1, 5), np.float32))["y"].shape == (1, 5)
    with pytest.raises(
        mdsl.ExecutionError, match=r"^Swish \(Swish\) at .*kernel k\d+_c_swish_f32 failed"
    ):
        exe(x=-np.ones((1, 5), np.float32))


def test_a_wrong_signature_or_broken_source_is_a_compile_error_with_the_compiler_output():
    swish = declare_swish()
    wrong = SWISH_C.replace("const double *attrs, int n_attrs", "int n_attrs")
    mdsl.register_op_impl("Swish", backend="c", source=wrong, symbol="swish_f32")
    with pytest.raises(mdsl.CompileError, match=r"(?s)C compiler failed.*swish_f32"):
        mdsl.compile(swish_graph(swish, shape=(2, 5)), backend="c")


def build_library(tmp_path, name="libswish.so"):
    (tmp_path / HEADER_FILE).write_text(header_text())
    src = tmp_path / "swish_lib.c"
    src.write_text(f'#include "{HEADER_FILE}"\n' + SWISH_C)
    lib = tmp_path / name
    cmd = ["cc", "-O2", "-shared", "-fPIC", str(src), "-o", str(lib), "-lm"]
    subprocess.run(cmd, check=True, capture_output=True)
    return lib


def test_library_binding_is_linked_into_the_graph(tmp_path):
    swish = declare_swish()
    lib = build_library(tmp_path)
    mdsl.register_op_impl("Swish", backend="c", library=str(lib), symbol="swish_f32")
    exe = mdsl.compile(swish_graph(swish), backend="c")
    x = np.random.default_rng(1).normal(0, 2, (3, 5)).astype(np.float32)
    np.testing.assert_allclose(exe(x=x)["y"], swish_reference(2 * x) + 1, rtol=1e-6, atol=1e-6)
    source = next(iter(exe.sources.values()))
    assert "extern int swish_f32(const mdsl_tensor *inputs" in source
    assert "swish_one" not in source  # the library's code is not in the unit


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"source": SWISH_C, "symbol": "f(); system"}, "symbol= a C identifier"),
        ({"source": SWISH_C, "symbol": "mdsl_run"}, "reserved"),
        ({"source": SWISH_C, "symbol": "k3_add"}, "reserved"),
        ({"source": SWISH_C}, "symbol= a C identifier"),
        ({"source": SWISH_C, "library": "x.so", "symbol": "f"}, "exactly one of"),
        ({"library": "/no/such/lib.so", "symbol": "f"}, "does not exist"),
        ({"library": "/tmp/a,b.so", "symbol": "f"}, "comma or a control character"),
        ({"library": 42, "symbol": "f"}, "must be a path"),
        ({"source": "  ", "symbol": "f"}, "C source text"),
        ({"source": SWISH_C, "symbol": "f", "flags": "-O0"}, "unknown option flags"),
    ],
)
def test_bad_c_bindings_are_refused_at_registration(options, match):
    with pytest.raises(mdsl.GraphError, match=match):
        mdsl.register_op_impl("Swish", backend="c", **options)


def test_a_python_function_is_not_a_c_binding():
    with pytest.raises(mdsl.GraphError, match="not a Python function"):
        mdsl.register_op_impl("Swish", lambda x: x, backend="c", source=SWISH_C, symbol="f")
