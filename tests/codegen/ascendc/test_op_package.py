"""One Python op definition -> a CANN custom-operator package (msopgen layout).

Three packages: a pointwise custom op (an `@mdsl.op_proto` with an attr, an "expr" binding
the kernel is generated from and a numpy reference), a row reduction and a
QLinearMatMul-style scaled matmul (written as small graphs). Each passes the real-header
check the way CANN's op build compiles it (OpDef/tiling/proto passes of op_host, the
kernel with the GET_TILING_DATA header the build generates); their golden data equal the
reference, and the same kernel run through the emulation reproduces the golden outputs.
The custom op's package covers both dtypes its proto lists: each combination's kernel
binary passes the check (compiled with that combination's ORIG_DTYPE_ defines, as the op
build compiles each binary), and each has golden data from the reference.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ir.dtype import DType
from mdsl.targets.ascendc import Emulator, build_op_package, build_project
from mdsl.targets.ascendc.op_package import data_file, op_variants, read_raw
from mdsl.targets.ascendc.shape_rules import ShapeRule
from tests.codegen.ascendc import cann
from tests.codegen.ascendc.conftest import needs_cxx


@mdsl.op_proto(
    "ScaledSilu",
    inputs={"x": ["float16", "float32"]},
    outputs={"y": ["float16", "float32"]},
    attrs={"alpha": mdsl.Attr(float, default=1.0)},
)
def scaled_silu(x, *, alpha):
    """alpha * x * sigmoid(x), elementwise."""
    return x


mdsl.register_op_impl(
    "ScaledSilu", lambda x, *, alpha: x * mdsl.expr.sigmoid(x) * alpha, backend="expr"
)


@mdsl.register_op_impl("ScaledSilu")
def scaled_silu_ref(x, *, alpha):
    x32 = x.astype(np.float32)
    return (alpha * x32 / (1.0 + np.exp(-x32))).astype(x.dtype)


def pointwise_op() -> mdsl.Graph:
    with mdsl.Graph("scaled_silu") as g:
        g.output(scaled_silu(g.input("x", (8, 64), "float16"), alpha=0.5), "y")
    return g


def reduction_op() -> mdsl.Graph:
    """Row sums of squares: (6, 100) -> (6,), the reduction family."""
    with mdsl.Graph("row_sum_squares") as g:
        x = g.input("x", (6, 100))
        g.output(ops.reduce_sum(x * x, axes=(1,), keepdims=False), "y")
    return g


def qlinear_matmul_op() -> mdsl.Graph:
    """The README's QLinearMatMul in float32: (a @ b) * scale_a * scale_b, one cube kernel
    with its scaling epilogue; M = 33, N = 40 are not multiples of the cube's 16."""
    with mdsl.Graph("q_linear_mat_mul") as g:
        a = g.input("a", (33, 64))
        b = g.input("b", (64, 40))
        sa = g.input("scale_a", (1,))
        sb = g.input("scale_b", (1,))
        g.output((a @ b) * sa * sb, "y")
    return g


PACKAGES = {
    "pointwise": (pointwise_op, ("Ascend910B3", "Ascend310P3"), "220,200"),
    "reduction": (reduction_op, ("Ascend910B3",), "220"),
    "qlinear_matmul": (qlinear_matmul_op, ("Ascend910B3",), "220"),
}


@functools.cache
def package(name: str) -> dict:
    build, socs, _ = PACKAGES[name]
    return build_op_package(build(), socs=socs)


def test_the_package_has_the_msopgen_layout():
    files = package("pointwise")
    assert {
        "op_host/scaled_silu.cpp",
        "op_host/scaled_silu_tiling.h",
        "op_kernel/scaled_silu.cpp",
        "CMakeLists.txt",
        "CMakePresets.json",
        "build.sh",
        "README.md",
        "testcases/ScaledSilu.json",
        "testcases/data/input_x.bin",
        "testcases/data/output_y.bin",
    } <= set(files)
    host = files["op_host/scaled_silu.cpp"]
    for piece in (
        "class ScaledSilu : public OpDef {",
        'this->Input("x")\n            .ParamType(REQUIRED)\n            .DataType({ge::DT_FLOAT16, ge::DT_FLOAT})\n            .Format({ge::FORMAT_ND, ge::FORMAT_ND})',
        'this->Attr("alpha").AttrType(OPTIONAL).Float(1.0);',
        "this->SetInferShape(ge::InferShape).SetInferDataType(ge::InferDataType);",
        ".SetTiling(optiling::TilingFunc)",
        '.AddConfig("ascend310p")\n            .AddConfig("ascend910b");',
        "*context->GetOutputShape(0) = *context->GetInputShape(0);",
        "OP_ADD(ScaledSilu);",
    ):
        assert piece in host, piece
    tiling = files["op_host/scaled_silu_tiling.h"]
    assert (
        "BEGIN_TILING_DATA_DEF(" in tiling and "REGISTER_TILING_DATA_CLASS(ScaledSilu, " in tiling
    )
    kernel = files["op_kernel/scaled_silu.cpp"]
    assert (
        'extern "C" __global__ __aicore__ void scaled_silu(GM_ADDR in0, GM_ADDR out0, GM_ADDR workspace, GM_ADDR tiling)'
        in kernel
    )
    assert "GET_TILING_DATA(tilingData, tiling);" in kernel and "ICPU_RUN_KF" not in kernel
    presets = json.loads(files["CMakePresets.json"])
    variables = presets["configurePresets"][0]["cacheVariables"]
    assert variables["ASCEND_COMPUTE_UNIT"]["value"] == "ascend310p;ascend910b"


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_package_passes_the_cann_op_build_check(name):
    cann.require()
    _, _, families = PACKAGES[name]
    result = cann.check_files(package(name), families)
    assert result.ok, result.output
    assert "(op project)" in result.output and "host[proto]" in result.output


def test_golden_data_are_the_reference_binding():
    files = package("pointwise")
    x = read_raw(files["testcases/data/input_x.bin"], DType.float16, (8, 64))
    y = read_raw(files["testcases/data/output_y.bin"], DType.float16, (8, 64))
    np.testing.assert_array_equal(y, scaled_silu_ref(x, alpha=0.5))
    case = json.loads(files["testcases/ScaledSilu.json"])[0]
    assert case["op"] == "ScaledSilu"
    assert case["input_desc"][0]["shape"] == [8, 64] and case["input_desc"][0]["type"] == [
        "float16"
    ]
    assert case["attr"] == [{"name": "alpha", "type": "float", "value": 0.5}]


@needs_cxx
@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_kernel_reproduces_the_golden_outputs(name):
    """The package's kernel, run through the emulation as a kernel-launch project, equals
    the golden outputs computed from the reference."""
    build, socs, _ = PACKAGES[name]
    g = build()
    files = package(name)
    feeds = {
        n: read_raw(files[f"testcases/data/input_{n}.bin"], t.dtype, tuple(int(d) for d in t.shape))
        for n, t in g.inputs.items()
    }
    out = Emulator(build_project(g, soc=socs[0])).run(feeds)
    for n, t in g.outputs.items():
        golden = read_raw(files[f"testcases/data/output_{n}.bin"], t.dtype, out[n].shape)
        tol = 2e-3 if t.dtype == DType.float16 else 1e-4
        np.testing.assert_allclose(out[n].astype(np.float64), golden, rtol=tol, atol=tol)


def test_shape_rules_follow_the_families():
    assert "GetDimNum() - 2" in package("qlinear_matmul")["op_host/q_linear_mat_mul.cpp"]
    host = package("reduction")["op_host/row_sum_squares.cpp"]
    assert "const size_t axes[] = {1};" in host and "const bool keepdims = false;" in host


def test_an_ambiguous_shape_rule_says_how_to_write_it_by_hand():
    with mdsl.Graph("square_sums") as g:
        x = g.input("x", (4, 4))
        g.output(ops.reduce_sum(x, axes=(1,), keepdims=False), "y")
    with pytest.raises(mdsl.CompileError) as info:
        build_op_package(g)
    message = str(info.value)
    assert "op SquareSums: mdsl cannot write its InferShape" in message
    assert "static ge::graphStatus InferShape(gert::InferShapeContext *context)" in message
    assert "op_host/square_sums.cpp" in message and "SetInferShape" in message
    files = build_op_package(
        g, infer_shape=ShapeRule("reduction", {"axes": (1,), "keepdims": False})
    )
    assert "const size_t axes[] = {1};" in files["op_host/square_sums.cpp"]


def test_an_op_must_be_one_kernel():
    with mdsl.Graph("two_steps") as g:
        x = g.input("x", (4, 64))
        g.output(ops.softmax(ops.transpose(x, perm=(1, 0)), axis=0), "y")
        g.output(x * 2.0, "z")
    with pytest.raises(mdsl.CompileError, match="an op package holds one kernel launch"):
        build_op_package(g)


def test_a_soc_that_cannot_run_the_op_is_refused():
    with pytest.raises(mdsl.CompileError, match="matmul in float32: the cube unit of Ascend310P3"):
        build_op_package(qlinear_matmul_op(), socs=("Ascend910B3", "Ascend310P3"))


def test_mdsl_emit_writes_the_package(tmp_path):
    written = mdsl.emit(
        pointwise_op(), target="ascendc", out_dir=tmp_path, project="custom_op", op_type="MySilu"
    )
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    assert "op_host/my_silu.cpp" in names and "op_kernel/my_silu.cpp" in names
    assert "class MySilu : public OpDef" in (tmp_path / "op_host/my_silu.cpp").read_text()
    with pytest.raises(mdsl.CompileError, match="unknown AscendC project 'package'"):
        mdsl.emit(pointwise_op(), target="ascendc", out_dir=tmp_path, project="package")


# -- every dtype combination of the proto -----------------------------------------------------------
# the op build's defines for one binary (ascendc_impl_build.py's DTYPE_MAP names)
BUILD_DEFINES = {DType.float16: ("DT_FLOAT16", "half"), DType.float32: ("DT_FLOAT", "float")}


def _binary_flags(params) -> str:
    """Compile flags selecting one combination's binary: ORIG_DTYPE_/DTYPE_ per param
    (replacing what the check derives from the OpDef's first DataType entry)."""
    flags = []
    for name, dtype in params:
        orig, ctype = BUILD_DEFINES[dtype]
        n = name.upper()
        flags += [
            f"-UORIG_DTYPE_{n}",
            f"-DORIG_DTYPE_{n}={orig}",
            f"-UDTYPE_{n}",
            f"-DDTYPE_{n}={ctype}",
        ]
    return " ".join(flags)


def test_the_package_lists_every_dtype_combination_of_the_proto():
    variants, skipped = op_variants(pointwise_op(), PACKAGES["pointwise"][1])
    assert [v.tag for v in variants] == ["float16", "float32"] and not skipped
    case = json.loads(package("pointwise")["testcases/ScaledSilu.json"])
    assert [c["input_desc"][0]["type"] for c in case] == [["float16"], ["float32"]]


@pytest.mark.parametrize("dtype", [DType.float32])
def test_each_dtype_combination_passes_the_cann_op_build_check(dtype):
    """The other combination's binary (the first one is the check above)."""
    cann.require()
    _, _, families = PACKAGES["pointwise"]
    flags = _binary_flags([("x", dtype), ("y", dtype)])
    result = cann.check_files(package("pointwise"), families, kernel_flags=flags)
    assert result.ok, result.output


def test_a_combination_the_opdef_does_not_list_has_no_kernel():
    """The kernel source selects its binary from the build's defines: any other dtype
    stops the compile (so the check above compiled the float32 kernel, not the float16)."""
    cann.require()
    flags = "-UORIG_DTYPE_X -DORIG_DTYPE_X=DT_INT8"
    result = cann.check_files(package("pointwise"), "220", kernel_flags=flags)
    assert not result.ok and "a dtype combination the OpDef does not list" in result.output


def test_golden_data_of_every_combination_are_the_reference_binding():
    files = package("pointwise")
    for tag, dtype in (("", DType.float16), ("float32", DType.float32)):
        x = read_raw(files[f"testcases/{data_file('input', 'x', tag)}"], dtype, (8, 64))
        y = read_raw(files[f"testcases/{data_file('output', 'y', tag)}"], dtype, (8, 64))
        assert x.dtype == dtype.np
        np.testing.assert_array_equal(y, scaled_silu_ref(x, alpha=0.5))


@needs_cxx
def test_the_float32_kernel_reproduces_its_golden_outputs():
    files = package("pointwise")
    variants, _ = op_variants(pointwise_op(), PACKAGES["pointwise"][1])
    f32 = variants[1]
    x = read_raw(files[f"testcases/{data_file('input', 'x', f32.tag)}"], DType.float32, (8, 64))
    golden = read_raw(
        files[f"testcases/{data_file('output', 'y', f32.tag)}"], DType.float32, (8, 64)
    )
    out = Emulator(f32.project).run({"x": x})["y"]
    np.testing.assert_allclose(out, golden, rtol=1e-5, atol=1e-6)
