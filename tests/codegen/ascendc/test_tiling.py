"""The tiling planner: tile arithmetic, and the compile-time diagnostics for what the
hardware would reject (misaligned tiles, UB overflow, dtypes the vector and cube units
lack), each naming the kernel and its graph nodes with their source lines."""

from __future__ import annotations

import re

import pytest

import mdsl
from mdsl import ops
from mdsl.targets.ascendc import SocSpec, TilingError, build_project
from mdsl.targets.ascendc.tiling import Resources, plan_rows

SOC = SocSpec.named("Ascend910B3")


def plan(rows, row_length, resources, **kw):
    kw.setdefault("soc", SOC)
    return plan_rows("k", rows=rows, row_length=row_length, resources=resources, **kw)


# -- arithmetic ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rows, length, split, cores, tile, tiles, tail, units, blocks",
    [
        (1, 1000, True, 4, 256, 4, 232, 4, 4),  # one long row spread over the cores
        (64, 1000, True, 4, 1000, 1, 1000, 64, 4),  # enough rows: whole rows per tile
        (3, 100, False, 8, 104, 1, 100, 3, 3),  # row kernels never split a row
        (5, 50000, False, 8, 16376, 4, 872, 5, 5),  # UB-bound: (196608 - 8) // 12 -> 16376
        (1, 7, True, 40, 8, 1, 7, 1, 1),  # a short row: one aligned tile, one block
    ],
)
def test_tiles_cover_rows_within_the_unified_buffer(
    rows, length, split, cores, tile, tiles, tail, units, blocks
):
    t = plan(rows, length, Resources(12, 8, 8, split), cores=cores)
    assert (t.tile_length, t.tiles_per_row, t.tail_length) == (tile, tiles, tail)
    assert (t.units, t.block_dim) == (units, blocks)
    assert t.units_per_block * t.block_dim + t.units_remainder == t.units
    assert (t.tiles_per_row - 1) * t.tile_length + t.tail_length == length
    assert t.tile_length % 8 == 0 and t.ub_bytes <= SOC.ub_bytes
    assert not t.notes


def test_compare_kernels_tile_in_whole_256_byte_repeats():
    t = plan(1, 1000, Resources(20, 0, 64, False))
    assert t.tile_length == 1024


# -- forced tiles: repaired, or rejected with strict ---------------------------------------------
def softmax_graph():
    with mdsl.Graph("sm") as g:
        x = g.input("x", (4, 1000), "float16")
        g.output(ops.softmax(x * 2.0, axis=-1), "y")
    return g


LOCATION = r"kernel k\d+_mul_softmax \(Mul \(Mul\) at .*test_tiling.py:\d+; Softmax \(Softmax\) at .*test_tiling.py:\d+\)"


def test_a_misaligned_tile_is_repaired_and_reported():
    p = build_project(softmax_graph(), tile_length=1000)
    (kernel,) = p.kernels
    assert kernel.tiling.tile_length == 992  # float16 tiles: multiples of 16 elements
    (d,) = p.diagnostics
    assert d.level == "repaired"
    assert re.fullmatch(
        f"repaired: {LOCATION}: tile_length 1000 is not a multiple of 16 elements .*; using 992",
        str(d),
    )
    assert "tile_length 1000 is not a multiple of 16" in p.files["README.md"]
    assert "MdslPlanRows(4, 1000, " in p.files["op_host/sm_tiling.cpp"]
    assert ", 992,\n" in p.files["op_host/sm_tiling.cpp"]  # the host tiling keeps the repaired tile


def test_a_misaligned_tile_is_rejected_when_strict():
    with pytest.raises(TilingError) as info:
        build_project(softmax_graph(), tile_length=1000, strict=True)
    assert isinstance(info.value, mdsl.CompileError)
    (d,) = info.value.diagnostics
    assert re.search(
        f"rejected: {LOCATION}: tile_length 1000 is not a multiple of 16 elements", str(info.value)
    )
    assert "the nearest tile length the hardware takes is 992" in d.message


def test_a_tile_over_the_unified_buffer_is_shrunk_or_rejected():
    p = build_project(softmax_graph(), tile_length=1 << 20)
    (kernel,) = p.kernels
    (d,) = p.diagnostics
    assert (
        f"over the {SOC.ub_bytes}-byte UB of Ascend910B3; using {kernel.tiling.tile_length}"
        in d.message
    )
    assert kernel.tiling.ub_bytes <= SOC.ub_bytes < kernel.tiling.ub_bytes + 17 * 16
    with pytest.raises(
        TilingError, match=r"needs .* bytes of Unified Buffer, over the 196608-byte UB"
    ):
        build_project(softmax_graph(), tile_length=1 << 20, strict=True)


def test_a_kernel_whose_smallest_tile_overflows_the_unified_buffer_is_rejected():
    tiny = SocSpec.named("Ascend910B3", ub_bytes=256)
    with pytest.raises(TilingError) as info:
        build_project(softmax_graph(), soc=tiny)
    message = str(info.value)
    assert re.search(
        f"rejected: {LOCATION}: even the smallest tile \\(16 elements\\) needs \\d+ bytes", message
    )
    assert "over the 256-byte UB of Ascend910B3" in message


# -- dtypes ------------------------------------------------------------------------------------------
def test_float64_arithmetic_is_rejected_naming_kernel_and_nodes():
    with mdsl.Graph("f64") as g:
        x = g.input("x", (4, 100), "float64")
        y = ops.exp(x, name="Growth")
        g.output(ops.relu(y), "y")
    with pytest.raises(TilingError) as info:
        build_project(g)
    message = str(info.value)
    assert re.search(
        r"kernel k\d+_exp_relu \(Growth \(Exp\) at .*test_tiling.py:\d+; Relu \(Relu\) at", message
    )
    assert (
        "float64 arithmetic: the vector unit of Ascend910B3 supports bfloat16, bool, float16, float32"
        in message
    )


def test_every_rejected_kernel_is_listed_at_once():
    with mdsl.Graph("two") as g:
        x = g.input("x", (4, 100), "int64")
        w = g.input("w", (100, 3), "float64")
        g.output(x * 3, "scaled")
        g.output(ops.cast(x, to="float64") @ w, "product")
    with pytest.raises(TilingError) as info:
        build_project(g)
    levels = [(d.level, d.kernel.split("_", 1)[1]) for d in info.value.diagnostics]
    assert ("rejected", "mul") in levels and ("rejected", "matmul") in levels
    assert (
        "matmul in float64: the cube unit of Ascend910B3 supports bfloat16, float16, float32, int8"
        in str(info.value)
    )
    assert "int64 arithmetic" in str(info.value)


def test_bfloat16_depends_on_the_soc():
    with mdsl.Graph("bf") as g:
        x = g.input("x", (4, 100), "bfloat16")
        g.output(x * 2.0 + 1.0, "y")
    assert build_project(g, soc="Ascend910B3").device_kernels
    with pytest.raises(TilingError, match="bfloat16 arithmetic: the vector unit of Ascend310P3"):
        build_project(g, soc="Ascend310P3")


def test_copies_move_any_dtype():
    with mdsl.Graph("t64") as g:
        x = g.input("x", (3, 5), "int64")
        g.output(ops.transpose(x, perm=(1, 0)), "y")
    (k,) = build_project(g).kernels
    assert k.kernel.is_copy and k.on_device


# -- fallbacks ---------------------------------------------------------------------------------------
def test_kernels_without_a_template_fall_back_to_the_host_and_say_why():
    with mdsl.Graph("fb") as g:
        x = g.input("x", (1, 2, 8, 8))
        y = ops.max_pool(x, kernel_shape=(2, 2), strides=(2, 2), name="Pool")
        g.output(ops.mod(y, 3.0, fmod=True, name="Wrap"), "y")
    p = build_project(g)
    assert [k.on_device for k in p.kernels] == [False, False]
    reasons = [k.kernel.reason for k in p.kernels]
    assert reasons == [
        "no AscendC template for pooling kernels",
        "expression op 'fmod' has no AscendC vector form",
    ]
    assert [d.level for d in p.diagnostics] == ["fallback", "fallback"]
    readme = p.files["README.md"]
    assert "## Not generated for the NPU (host fallbacks)" in readme
    assert re.search(
        r"\| 0 \| `k\d+_maxpool` \| Pool \(MaxPool\) at .*test_tiling.py:\d+ \| no AscendC template for pooling kernels \|",
        readme,
    )
    runner = p.files["host/fb_runner.cpp"]
    assert "fallback(0, buffers)" in runner and "fallback(1, buffers)" in runner


def test_symbolic_graphs_need_shapes():
    with mdsl.Graph("sym") as g:
        g.output(g.input("x", ("N", 100)) + 1.0, "y")
    with pytest.raises(mdsl.CompileError, match=r"symbolic dims N: .*pass shapes=\{'N': \.\.\.\}"):
        build_project(g)
    assert build_project(g, shapes={"N": 3}).kernels[0].tiling.row_length == 300


def test_unknown_soc_names_the_presets():
    with pytest.raises(
        mdsl.CompileError, match="unknown Ascend SoC 'Ascend999'; presets: Ascend910B1, Ascend910B2"
    ):
        SocSpec.named("Ascend999")


# -- the per-SoC capability table ------------------------------------------------------------------
def test_family_names_are_refused_with_the_parts():
    """CANN's CMake reads SOC_VERSION=Ascend910B as the old Ascend910 (dav-c100)."""
    with pytest.raises(mdsl.CompileError, match="CANN needs the part: Ascend910B1, Ascend910B2"):
        SocSpec.named("Ascend910B")


@pytest.mark.parametrize(
    "name, cube, vector, ub",
    [
        ("Ascend910B1", 24, 48, 192 * 1024),
        ("Ascend910B2", 24, 48, 192 * 1024),
        ("Ascend910B3", 20, 40, 192 * 1024),
        ("Ascend910B4", 20, 40, 192 * 1024),
        ("Ascend310P3", 8, 8, 256 * 1024),
    ],
)
def test_presets_carry_the_platform_numbers(name, cube, vector, ub):
    soc = SocSpec.named(name)
    assert (soc.cube_cores, soc.vector_cores, soc.ub_bytes) == (cube, vector, ub)
    assert soc.split_cores == name.startswith("Ascend910B")


def _rejection(g, soc: str) -> str:
    with pytest.raises(TilingError) as info:
        build_project(g, soc=soc)
    (d,) = info.value.diagnostics
    assert d.level == "rejected" and d.kernel and d.nodes
    return str(d)


def test_the_310p_has_no_datacopypad():
    """Rows that are not whole 32-byte blocks need DataCopyPad: rejected at emit time for
    the 310P (naming kernel, nodes and SoC), generated for the A2 parts."""
    with mdsl.Graph("tails") as g:
        x = g.input("x", (4, 50))
        g.output(ops.softmax(x * 2.0, axis=-1, name="Probs"), "y")
    assert build_project(g, soc="Ascend910B3").device_kernels
    message = _rejection(g, "Ascend310P3")
    assert re.search(
        r"kernel k\d+_mul_softmax \(.*Probs \(Softmax\) at .*test_tiling.py:\d+", message
    )
    assert "rows of 50 float32 (200 bytes) need DataCopyPad" in message
    assert "which Ascend310P3 does not have" in message


def test_the_310p_cube_takes_no_float32():
    with mdsl.Graph("f32mm") as g:
        a = g.input("a", (32, 64))
        w = mdsl.param("w", (64, 32))
        g.output(a @ w, "y")
    message = _rejection(g, "Ascend310P3")
    assert "matmul in float32: the cube unit of Ascend310P3 supports float16, int8" in message


def test_whole_block_rows_pass_on_the_310p_without_datacopypad():
    with mdsl.Graph("aligned") as g:
        x = g.input("x", (4, 64))
        g.output(ops.softmax(x, axis=-1), "y")
    p = build_project(g, soc="Ascend310P3")
    common = p.files["op_kernel/mdsl_kernel_common.h"]
    assert "DataCopyPad" not in common.replace("has no DataCopyPad", "")
    assert "AscendC::SetKernelMode" not in p.files[f"op_kernel/{p.kernels[0].name}.cpp"]


def test_scattered_stores_run_on_one_core():
    """A softmax over the first axis stores with a stride (SetValue through the data
    cache): one block, so no two cores write into one 64-byte line; the host agrees."""
    with mdsl.Graph("columns") as g:
        z = g.input("z", (4, 5, 7))
        g.output(ops.softmax(z, axis=0), "y")
    (k,) = build_project(g).kernels
    assert k.tiling.block_dim == 1
    tiling = build_project(g).files["op_host/columns_tiling.cpp"]
    assert "false, 0,\n                      1, UbBytes(platform), plan)" in tiling
