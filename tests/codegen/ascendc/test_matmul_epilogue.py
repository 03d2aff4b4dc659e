"""A matmul's fused epilogue runs on the vector unit from the result in the UB: on the
A2 parts (MIX 1:2) the cube unit hands each core's result over one base block at a time
(`Iterate`, `GetTensorC` into a VECIN tensor, rows padded to 32 bytes) and C never goes
to global memory. The kernel then moves A + B + the epilogue's operands + the output,
not two more copies of C; the emulation (which models the block order and the tail
blocks' layout) equals the interpreter with tails in M and N and several blocks per core,
and the real CANN headers accept the kernels (test_cann_headers.py checks `epilogues`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mdsl
from mdsl.targets.ascendc import Emulator, SocSpec, build_project
from mdsl.targets.ascendc.kernels import MatmulKernel
from mdsl.targets.ascendc.traffic import gm_bytes, minimum_bytes
from tests.codegen.ascendc import golden_graphs, graphs
from tests.codegen.ascendc.conftest import needs_cxx
from tests.codegen.ascendc.test_emulation import assert_same

# a small UB: a core's 48 x 256 share of the result (48 KiB) needs several base blocks
SMALL = SocSpec.named("Ascend910B3", ub_bytes=40 * 1024, vector_cores=2, cube_cores=1)


def test_the_golden_dense_moves_its_operands_and_output_once():
    """x (9 x 20), w (20 x 12), the bias (read once per block) and the output: 2160 bytes,
    the minimum (it was 3408 while C went to GM and the epilogue read it back)."""
    p = build_project(golden_graphs.golden_dense())
    (pk,) = p.device_kernels
    assert pk.kernel.result_in_ub
    operands = (9 * 20 + 20 * 12 + 12) * 4
    output = 9 * 12 * 4
    assert gm_bytes(pk.kernel) == minimum_bytes(pk.kernel, p.plan) == operands + output
    kernel = p.files["op_kernel/k1_gemm_relu.cpp"]
    assert "TPosition::VECIN, CubeFormat::ND_ALIGN" in kernel and "IterateAll" not in kernel


@needs_cxx
def test_the_emulated_golden_dense_moves_the_estimated_bytes():
    g = golden_graphs.golden_dense()
    emu = Emulator(build_project(g))
    feeds = {"x": np.random.default_rng(1).standard_normal((9, 20)).astype(np.float32)}
    assert_same(emu.run(feeds), mdsl.interpret(g, feeds))
    assert emu.gm_traffic == {"k1_gemm_relu": (9 * 20 + 20 * 12 + 12 + 9 * 12) * 4}


@needs_cxx
@pytest.mark.parametrize("soc", [SocSpec.named("Ascend910B3"), SMALL], ids=["b3", "small_ub"])
def test_epilogues_on_result_blocks_equal_the_interpreter(soc):
    p = build_project(graphs.epilogues(), soc=soc)
    dense = next(k.kernel for k in p.device_kernels if isinstance(k.kernel, MatmulKernel))
    assert dense.result_in_ub and dense.epilogue is not None
    feeds = graphs.epilogues_feeds()
    assert_same(Emulator(p).run(feeds), mdsl.interpret(graphs.epilogues(), feeds))


@needs_cxx
def test_the_kernel_places_blocks_in_either_iterate_order():
    """matmul_tiling may choose to walk N first (iterateOrder 1): the kernel places each
    block by the tiling's order, so results do not change."""
    p = build_project(graphs.epilogues(), soc=SMALL)
    name = next(n for n in p.files if n.endswith("_tiling.cpp") and n.startswith("op_host/"))
    anchor = "    cubeTiling.SetBufferSpace(-1, -1, -1);\n"
    assert anchor in p.files[name]
    first_n = anchor + "    cubeTiling.SetTraverse(matmul_tiling::MatrixTraverse::FIRSTN);\n"
    files = {**p.files, name: p.files[name].replace(anchor, first_n)}
    emu = Emulator(dataclasses.replace(p, files=files))
    feeds = graphs.epilogues_feeds(seed=3)
    assert_same(emu.run(feeds), mdsl.interpret(graphs.epilogues(), feeds))


@needs_cxx
def test_the_emulation_hands_out_tail_blocks_at_their_real_size():
    """Asking GetTensorC for a whole base block where the block is a tail (as a kernel that
    ignored the tails would) fails in the emulation instead of reading past the result."""
    p = build_project(graphs.epilogues(), soc=SMALL)
    name = next(n for n in p.files if n.endswith("gemm_add_tanh.cpp"))
    call = "GetTensorC<true, true>(block, 0, true, rows, cols, 0, gap)"
    assert call in p.files[name]
    wrong = call.replace("rows, cols", "cube.baseM, cube.baseN")
    broken = dataclasses.replace(p, files={**p.files, name: p.files[name].replace(call, wrong)})
    with pytest.raises(mdsl.ExecutionError, match="from a block of"):
        Emulator(broken).run(graphs.epilogues_feeds())


@needs_cxx
def test_without_the_matmul_client_the_result_goes_through_gm():
    """A SoC whose cores hold both units (as the 310P does) has no Matmul client to hand
    blocks over: C goes to GM and the epilogue reads it back, which the estimate counts."""
    g = golden_graphs.golden_dense()
    p = build_project(g, soc=SocSpec.named("Ascend910B3", split_cores=False))
    (pk,) = p.device_kernels
    assert not pk.kernel.result_in_ub
    assert gm_bytes(pk.kernel) == minimum_bytes(pk.kernel, p.plan) + 2 * 9 * 12 * 4 + 8 * 12 * 4
    feeds = {"x": np.random.default_rng(2).standard_normal((9, 20)).astype(np.float32)}
    assert_same(Emulator(p).run(feeds), mdsl.interpret(g, feeds))
