"""The op project `mdsl.emit(g, target="ascendc", ...)` writes: its files, the structure
of the kernels, the tiling structs, the README table from kernels to graph nodes, and,
where a CANN toolkit is installed, its build."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import mdsl
from mdsl.targets.ascendc import build_project, emit_ascendc
from tests.codegen.ascendc.conftest import example, project


def test_mdsl_emit_writes_the_op_project(tmp_path):
    g = example("resnet_block").build(channels=8, size=10)
    written = mdsl.emit(g, target="ascendc", out_dir=tmp_path, symbols={"N": 2})
    names = sorted(str(p.relative_to(tmp_path)) for p in written)
    kernels = [n for n in names if n.startswith("op_kernel/k")]
    assert len(kernels) == 4  # two convolutions: im2col + matmul each
    assert set(names) - set(kernels) == {
        "CMakeLists.txt",
        "README.md",
        "host/resnet_block_runner.cpp",
        "op_host/mdsl_tiling.h",
        "op_host/resnet_block_tiling.cpp",
        "op_host/resnet_block_tiling.h",
        "op_kernel/mdsl_kernel_common.h",
        "op_kernel/resnet_block_tiling_data.h",
    }
    cmake = (tmp_path / "CMakeLists.txt").read_text()
    assert all(f"${{CMAKE_CURRENT_SOURCE_DIR}}/{k}" in cmake for k in kernels)
    assert "ascendc_library(resnet_block_kernels_npu STATIC ${KERNEL_FILES})" in cmake
    assert "find_package(tikicpulib REQUIRED)" in cmake  # RUN_MODE=cpu


def test_the_readme_maps_kernels_to_layer_paths_and_source_lines():
    g = example("resnet_block").build(channels=8, size=10)
    readme = build_project(g, shapes={"N": 2}).files["README.md"]
    rows = [line for line in readme.splitlines() if re.match(r"\| \d+ \| `k", line)]
    assert len(rows) == 4
    conv, relu = rows[1], rows[3]
    assert "| cube + vector |" in conv
    # the optimizer folded the batch norm into a new Conv of the same layer
    layer = r"Block/conv_bn_relu/Conv(_\d+)? \(Conv\) at examples/resnet_block.py:36"
    assert re.search(
        layer + r"<br>Block/conv_bn_relu/Relu \(Relu\) at examples/resnet_block.py:43", conv
    )
    assert re.search(
        r"Block/Add \(Add\) at examples/resnet_block.py:62<br>Block/Relu \(Relu\) at examples/resnet_block.py:62",
        relu,
    )


def test_a_vector_kernel_has_the_ascendc_structure():
    text = project("vector_mix").files["op_kernel/k6_mul_add_relu.cpp"]
    for piece in (
        "class KernelK6MulAddRelu {",
        "__aicore__ inline void Init(GM_ADDR in0, GM_ADDR in1, GM_ADDR in2, GM_ADDR out0, const K6MulAddReluTilingData &tiling)",
        "__aicore__ inline void Process()",
        "__aicore__ inline void CopyIn(uint32_t len)",
        "__aicore__ inline void Compute(uint32_t len)",
        "__aicore__ inline void CopyOut(uint32_t len)",
        "TPipe pipe_;",
        "TQue<QuePosition::VECIN, BUFFER_NUM> inQueue_ld0_;",
        "TQue<QuePosition::VECOUT, BUFFER_NUM> outQueue_st0_;",
        "pipe_.InitBuffer(inQueue_ld0_, BUFFER_NUM, tiling_.tileLength * sizeof(float));",
        "MdslBlockRange(tiling_.unitsPerBlock, tiling_.unitsRemainder, tiling_.blockDim)",
        'extern "C" __global__ __aicore__ void k6_mul_add_relu(GM_ADDR in0, GM_ADDR in1, GM_ADDR in2, GM_ADDR out0, GM_ADDR workspace, GM_ADDR tiling)',
        "K6MulAddReluTilingData tilingData;\n    MdslCopyTiling(&tilingData, tiling);",
        "AscendC::SetKernelMode(KernelMode::AIV_MODE);",
        "k6_mul_add_relu<<<blockDim, l2ctrl, stream>>>(in0, in1, in2, out0, workspace, tiling);",
        "ICPU_RUN_KF(k6_mul_add_relu, blockDim, in0, in1, in2, out0, workspace, tiling);",
        "Mul(ld0, ld0, ld1, calcLen);",  # in place: the loaded tile is read once
        "Relu(st0, ld0, calcLen);",
    ):
        assert piece in text, piece
    common = project("vector_mix").files["op_kernel/mdsl_kernel_common.h"]
    assert "GetBlockIdx()" in common and "DataCopyPad(dst, src, params, pad);" in common


def test_a_row_kernel_reduces_with_scratch_buffers():
    """A row that fits is loaded once and held: the sum of exponentials works on a
    temporary so the held tile survives for the normalized store; a forced tile length
    streams the row again in every phase, computing in place."""
    text = project("rows").files["op_kernel/k4_softmax.cpp"]
    assert "ReduceMax<float>(red, ld0, work, len);" in text
    assert (
        "Exp(tmp0, tmp0, calcLen);\n        LocalTensor<float> red = redBuf_.Get<float>();" in text
    )
    assert "ReduceSum<float>(red, tmp0, work, len);" in text
    assert (
        "TBuf<TPosition::VECCALC> workBuf_;" in text and "TBuf<TPosition::VECCALC> redBuf_;" in text
    )
    assert "LoadRow(len);" in text and "FreeRow();" in text and "tilesPerRow; ++tile" not in text
    streamed = project("rows", tile_length=64).files["op_kernel/k4_softmax.cpp"]
    assert "for (uint32_t tile = 0; tile < tiling_.tilesPerRow; ++tile) {" in streamed
    assert (
        "Exp(ld0, ld0, calcLen);\n        LocalTensor<float> red = redBuf_.Get<float>();"
        in streamed
    )


def test_a_matmul_kernel_uses_the_matmul_api_and_a_vector_epilogue():
    text = project("cube").files["op_kernel/k3_matmul_add_gelu.cpp"]
    for piece in (
        '#include "lib/matmul_intf.h"',
        "Matmul<AType, BType, CType> mm;",
        "REGIST_MATMUL_OBJ(&op.pipe_, GetSysWorkSpacePtr(), op.mm, &tilingData.cubeTiling);",
        "mm.SetTensorA(gmA_[offsetA + static_cast<uint64_t>(m0) * 50], false);",
        "mm.SetTensorB(gmB_[offsetB + n0], false);",
        "for (uint32_t count = 0; mm.template Iterate<true>(); ++count) {",
        "mm.template GetTensorC<true, true>(block, 0, true, rows, cols, 0, gap);",
        "Epilogue(batch, m0 + bm * cube.baseM, rows, n0 + bn * cube.baseN, cols, stride);",
        "accRow_ = block[i * stride];",
        "Erf(acc, acc, calcLen);",
    ):
        assert piece in text, piece


def test_tiling_structs_are_declared_for_host_and_kernel():
    files = project("cube").files
    host, kernel = files["op_host/cube_tiling.h"], files["op_kernel/cube_tiling_data.h"]
    assert (
        "BEGIN_TILING_DATA_DEF(K3MatmulAddGeluTilingData)\nTILING_DATA_FIELD_DEF_STRUCT(TCubeTiling, cubeTiling);"
        in host
    )
    assert (
        "TILING_DATA_FIELD_DEF(uint32_t, localWorkspace);\nEND_TILING_DATA_DEF;\nREGISTER_TILING_DATA_CLASS(MdslK3MatmulAddGelu, K3MatmulAddGeluTilingData)"
        in host
    )
    assert (
        "struct K3MatmulAddGeluTilingData {\n    TCubeTiling cubeTiling;\n    uint32_t batch;"
        in kernel
    )
    tiling = files["op_host/cube_tiling.cpp"]
    assert "matmul_tiling::MultiCoreMatmulTiling cubeTiling(platform);" in tiling
    assert "cubeTiling.SetShape(37, 29, 50);" in tiling


def test_emit_ascendc_takes_the_ascendc_options(tmp_path):
    with mdsl.Graph("opts") as g:
        x = g.input("x", ("N", 320))  # whole 32-byte blocks: the 310P has no DataCopyPad
        g.output(mdsl.ops.softmax(x, axis=-1), "y")
    p = emit_ascendc(g, tmp_path, shapes={"N": 1}, soc="Ascend310P3", tile_length=100)
    readme = (tmp_path / "README.md").read_text()
    assert "for **Ascend310P3**" in readme and "shapes N=1" in readme
    assert (
        "## Planner diagnostics" in readme
        and "tile_length 100 is not a multiple of 8 elements" in readme
    )
    assert p.soc.ub_bytes == 256 * 1024


def _bisheng() -> str | None:
    """CANN's device compiler in the toolkit at $ASCEND_HOME_PATH (a header-only pack, such
    as the one the header check uses, has none), else on PATH."""
    home = os.environ.get("ASCEND_HOME_PATH")
    if home:
        for where in ("compiler/ccec_compiler/bin", "bin", "tools/ccec_compiler/bin"):
            if os.path.isfile(os.path.join(home, where, "bisheng")):
                return os.path.join(home, where, "bisheng")
    return shutil.which("bisheng")


@pytest.mark.skipif(
    _bisheng() is None,
    reason="no CANN toolkit with its compiler (bisheng) at $ASCEND_HOME_PATH to build the "
    "op project with (the header check and the emulation tests cover the kernels instead)",
)
def test_the_op_project_builds_with_cann(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    g = example("bert").bert(1, 64, 4)
    emit_ascendc(g, tmp_path / "src", shapes={"B": 2, "S": 16})
    configure = subprocess.run(
        [
            "cmake",
            "-S",
            str(tmp_path / "src"),
            "-B",
            str(tmp_path / "build"),
            "-DSOC_VERSION=Ascend910B3",
        ],
        capture_output=True,
        text=True,
    )
    assert configure.returncode == 0, configure.stdout + configure.stderr
    build = subprocess.run(
        ["cmake", "--build", str(tmp_path / "build"), "-j2"], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]


def test_the_readme_lists_gm_bytes_per_kernel_next_to_the_minimum():
    """Softmax over rows of 50 float32 (4 rows) that fit in the UB: x read once and y
    written once, 1600 bytes, the minimum. Streamed (a forced tile shorter than the row),
    the maximum, the sum and the normalized store each read x: 3200. Layer norm: the row
    held across mean, variance and store; scale and bias read once."""
    from tests.codegen.ascendc import golden_graphs

    def readme_row(p) -> str:
        (row,) = [line for line in p.files["README.md"].splitlines() if line.startswith("| 0 |")]
        return row

    g = golden_graphs.golden_softmax()
    assert readme_row(build_project(g)).endswith("| 1600 (1600) |")
    assert readme_row(build_project(g, tile_length=32)).endswith("| 3200 (1600) |")
    with mdsl.Graph("ln") as g:
        x = g.input("x", (2, 64))
        g.output(mdsl.ops.layer_norm(x, mdsl.param("s", (64,)), mdsl.param("b", (64,))), "y")
    from mdsl.targets.ascendc.traffic import gm_bytes, minimum_bytes

    row_bytes = 2 * 64 * 4
    (k,) = build_project(g).kernels
    assert gm_bytes(k.kernel) == minimum_bytes(k.kernel, build_project(g).plan)
    assert gm_bytes(k.kernel) == 2 * row_bytes + 2 * 64 * 4
    # streamed: x read by the mean, the variance and the store; scale and bias per row
    (k,) = build_project(g, tile_length=32).kernels
    assert gm_bytes(k.kernel) == 3 * row_bytes + 2 * row_bytes + row_bytes
