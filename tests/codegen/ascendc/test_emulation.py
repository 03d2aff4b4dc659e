"""Generated AscendC kernels, compiled unchanged against the emulation header and run on
the CPU, equal the interpreter: pointwise, row reductions (softmax, layer norm, sums),
matmuls with epilogues and convolutions, float32 and float16, with tails everywhere; the
fused groups of the ResNet and BERT examples too. The host tiling the project ships
computes the tiling the compile-time planner reported."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mdsl
from mdsl.ir.dtype import DType
from mdsl.targets.ascendc import Emulator, SocSpec, build_project
from mdsl.targets.ascendc.kernels import MatmulKernel, RowKernel, VectorKernel
from mdsl.targets.ascendc.tiling import RowTiling
from tests.codegen.ascendc import graphs
from tests.codegen.ascendc.conftest import emulator, example, needs_cxx, project

pytestmark = needs_cxx

TOLERANCE = {np.dtype(np.float32): 2e-5, np.dtype(np.float16): 2e-3, DType.bfloat16.np: 1e-2}


def assert_same(out: dict, ref: dict) -> None:
    assert out.keys() == ref.keys()
    for name in ref:
        assert out[name].dtype == ref[name].dtype, name
        assert out[name].shape == ref[name].shape, name
        tol = TOLERANCE[ref[name].dtype]
        np.testing.assert_allclose(
            out[name].astype(np.float64),
            ref[name].astype(np.float64),
            rtol=tol,
            atol=tol,
            err_msg=name,
        )


@pytest.mark.parametrize("name", ["vector_mix", "rows", "cube"])
def test_test_graphs_equal_the_interpreter(name):
    feeds = getattr(graphs, f"{name}_feeds")()
    ref = mdsl.interpret(getattr(graphs, name)(), feeds)
    assert_same(emulator(name).run(feeds), ref)


def test_every_kernel_kind_ran_on_the_device():
    """The test graphs exercise every template; only the max pool (no template) ran on
    the host, between the two device kernels around it."""
    kinds = set()
    for name in ("vector_mix", "rows", "cube"):
        p = project(name)
        kinds |= {type(k.kernel).__name__ for k in p.kernels}
        kinds |= {
            "copy" for k in p.kernels if isinstance(k.kernel, VectorKernel) and k.kernel.is_copy
        }
    assert kinds == {
        "VectorKernel",
        "RowKernel",
        "MatmulKernel",
        "Im2colKernel",
        "HostKernel",
        "copy",
    }
    hosts = [
        (k.name, [n.op_type for n in k.kernel.nodes]) for k in project("vector_mix").host_kernels
    ]
    assert [ops for _, ops in hosts] == [["MaxPool"]]
    assert not project("rows").host_kernels and not project("cube").host_kernels


def test_rows_spread_over_many_tiles_on_a_small_unified_buffer():
    """Planned for a SoC with a 2 KiB UB, rows of 300 do not fit: every phase streams
    them through several tiles, and the results do not change."""
    small = SocSpec.named("Ascend910B3", ub_bytes=2048, vector_cores=3)
    p = build_project(graphs.rows(), soc=small)
    long_rows = [k for k in p.kernels if k.kernel.row_length == 300]
    assert long_rows and all(k.tiling.tiles_per_row > 1 for k in long_rows)
    assert not any(k.kernel.resident for k in long_rows)
    emu = Emulator(p)
    feeds = graphs.rows_feeds(seed=3)
    assert_same(emu.run(feeds), mdsl.interpret(graphs.rows(), feeds))


@pytest.mark.parametrize("name", ["vector_mix", "rows", "cube"])
def test_host_tiling_matches_the_planner(name):
    emu, p = emulator(name), project(name)
    for index, pk in enumerate(p.device_kernels):
        block_dim, fields = emu.tiling(index)
        if isinstance(pk.kernel, (VectorKernel, RowKernel)):
            assert isinstance(pk.tiling, RowTiling)
            assert fields == pk.tiling.fields(), pk.name
            assert block_dim == pk.tiling.block_dim
        elif isinstance(pk.kernel, MatmulKernel):
            k = pk.kernel
            assert fields["batch"] == k.batch
            assert fields["units"] == k.batch * fields["mBlocks"] * fields["nBlocks"]
            assert 1 <= block_dim <= p.soc.cube_cores
            if pk.tiling.epilogue is not None:  # planned for a whole row; a core's share is shorter
                assert 0 < fields["tileLength"] <= pk.tiling.epilogue.tile_length


def test_resnet_block_equals_the_interpreter():
    g = example("resnet_block").build(channels=8, size=10)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 8, 10, 10)).astype(np.float32)}
    p = build_project(g, shapes={"N": 2})
    # both conv+BN+ReLU(+residual) groups run as im2col + cube matmul + vector epilogue
    assert [type(k.kernel).__name__ for k in p.kernels] == ["Im2colKernel", "MatmulKernel"] * 2
    assert all(k.body is not None for k in p.kernels if isinstance(k.kernel, MatmulKernel))
    assert_same(Emulator(p).run(feeds), mdsl.interpret(g, feeds))


def test_bert_tiny_equals_the_interpreter():
    g = example("bert").bert(2, 64, 4, masked=True)
    rng = np.random.default_rng(2)
    mask = np.ones((2, 16), np.float32)
    mask[1, 11:] = 0.0
    feeds = {"x": rng.standard_normal((2, 16, 64)).astype(np.float32), "mask": mask}
    p = build_project(g, shapes={"B": 2, "S": 16})
    assert not p.host_kernels
    origins = {k.origin for k in p.kernels}
    assert {"GEMM", "row reduction", "pointwise"} <= origins
    assert_same(Emulator(p).run(feeds), mdsl.interpret(g, feeds))


def test_feeds_are_validated():
    with pytest.raises(mdsl.ExecutionError, match="a"):
        emulator("vector_mix").run({"a": np.zeros((5, 77), np.float32)})


def test_soc_cores_only_change_the_spread():
    feeds = graphs.vector_mix_feeds(seed=5)
    one_core = dataclasses.replace(project("vector_mix").soc, vector_cores=1, cube_cores=1)
    p = build_project(graphs.vector_mix(), soc=one_core)
    assert all(k.tiling.block_dim == 1 for k in p.device_kernels)
    assert_same(Emulator(p).run(feeds), mdsl.interpret(graphs.vector_mix(), feeds))


def _mix_matmul() -> mdsl.Graph:
    """M = 37 (blocks of 16 and a tail of 5), N = 13: three units of work for the cube."""
    with mdsl.Graph("mix_matmul") as g:
        a = g.input("a", (37, 50))
        w = mdsl.param("w", (50, 13))
        g.output(mdsl.ops.relu(a @ w), "y")
    return g


def test_matmul_tails_under_mix_mode_block_indexing():
    """On the A2 parts each launched block is one cube core serving two vector cores
    (GetBlockIdx() in [0, 2 * blockDim)): the units go to vector blocks and the spare vector
    core of an odd count computes nothing; results equal the interpreter."""
    soc = SocSpec.named("Ascend910B3", vector_cores=8, cube_cores=4)
    p = build_project(_mix_matmul(), soc=soc)
    emu = Emulator(p)
    block_dim, fields = emu.tiling(0)
    assert fields["units"] == fields["blockDim"] == 3 and block_dim == 2  # 4 vector cores run
    feeds = {"a": np.random.default_rng(4).standard_normal((37, 50)).astype(np.float32)}
    assert_same(emu.run(feeds), mdsl.interpret(_mix_matmul(), feeds))


def test_the_emulation_catches_work_planned_over_the_cube_cores_only():
    """The same kernel without the vector-block guard (the bug of planning over the AIC
    count): the spare vector core takes a unit that does not exist and fails."""
    soc = SocSpec.named("Ascend910B3", vector_cores=8, cube_cores=4)
    p = build_project(_mix_matmul(), soc=soc)
    common = p.files["op_kernel/mdsl_kernel_common.h"]
    guard = "range.count = block < blocks ? perBlock + (block < remainder ? 1 : 0) : 0;"
    assert guard in common
    broken = dataclasses.replace(
        p,
        files={
            **p.files,
            "op_kernel/mdsl_kernel_common.h": common.replace(
                guard, "range.count = perBlock + (block < remainder ? 1 : 0); (void)blocks;"
            ),
        },
    )
    feeds = {"a": np.zeros((37, 50), np.float32)}
    with pytest.raises(mdsl.ExecutionError, match="block 3/2"):
        Emulator(broken).run(feeds)
