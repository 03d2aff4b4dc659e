"""Rows that fit in the Unified Buffer are read from global memory once: softmax and layer
norm load their row, keep it in UB for every phase (maximum, sum, normalized store) and
write the result once. The Kernel IR estimate (`traffic.gm_bytes`) equals the minimum
(inputs + outputs), the emulation measures the same bytes moving through GlobalTensor,
and the results still equal the interpreter (float32 within 1e-6, tails, float16).
Rows too long for the UB, or a forced tile length, stream through tiles in every phase.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.targets.ascendc import Emulator, SocSpec, build_project
from mdsl.targets.ascendc.kernels import RowKernel
from mdsl.targets.ascendc.traffic import gm_bytes, minimum_bytes
from tests.codegen.ascendc import golden_graphs
from tests.codegen.ascendc.conftest import needs_cxx

# float32 results within 1e-6 of the interpreter; float16 within its own rounding
TOLERANCE = {np.dtype(np.float32): 1e-6, np.dtype(np.float16): 2e-3}
ROW = 300  # not a multiple of the 8-element (32-byte) alignment: every row has a tail


def normalizations() -> mdsl.Graph:
    """Softmax and layer norm over rows of 300, float32 and float16."""
    with mdsl.Graph("normalizations") as g:
        x = g.input("x", (5, ROW))
        xh = g.input("xh", (3, ROW), "float16")
        gamma = mdsl.param("gamma", (ROW,))
        beta = mdsl.param("beta", (ROW,))
        g.output(ops.softmax(x, axis=-1), "softmax")
        g.output(ops.layer_norm(x, gamma, beta, axis=-1, epsilon=1e-5), "layer_norm")
        g.output(ops.softmax(xh, axis=-1), "softmax_half")
        half = (ops.cast(gamma, to="float16"), ops.cast(beta, to="float16"))
        g.output(ops.layer_norm(xh, *half, axis=-1, epsilon=1e-5), "layer_norm_half")
    return g


def _feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((5, ROW)).astype(np.float32),
        "xh": rng.standard_normal((3, ROW)).astype(np.float16),
    }


def _row_kernels(project):
    return [pk for pk in project.kernels if isinstance(pk.kernel, RowKernel)]


def _op_types(pk) -> set[str]:
    return {n.op_type for n in pk.kernel.nodes}


def test_softmax_and_layer_norm_move_the_minimum_when_rows_fit():
    p = build_project(normalizations())
    rows = _row_kernels(p)
    assert {"Softmax", "LayerNormalization"} <= set().union(*map(_op_types, rows))
    for pk in rows:
        assert pk.kernel.resident and pk.tiling.tiles_per_row == 1, pk.name
        assert gm_bytes(pk.kernel) == minimum_bytes(pk.kernel, p.plan), pk.name
        source = p.files[f"op_kernel/{pk.name}.cpp"]
        assert source.count("MdslCopyIn(") == len(pk.kernel.loads), pk.name  # one load per input


def test_the_golden_softmax_moves_the_minimum():
    p = build_project(golden_graphs.golden_softmax())
    (pk,) = _row_kernels(p)
    assert gm_bytes(pk.kernel) == minimum_bytes(pk.kernel, p.plan) == 2 * 4 * 50 * 4


def test_rows_that_do_not_fit_stream_through_tiles():
    """A 2 KiB UB cannot hold a row of 300 floats: every phase streams it again."""
    small = SocSpec.named("Ascend910B3", ub_bytes=2048)
    p = build_project(normalizations(), soc=small)
    softmax = next(pk for pk in _row_kernels(p) if "Softmax" in _op_types(pk))
    assert not softmax.kernel.resident and softmax.tiling.tiles_per_row > 1
    # the maximum, the sum of exponentials and the normalized store each read the row
    assert gm_bytes(softmax.kernel) == 3 * 5 * ROW * 4 + 5 * ROW * 4


def _assert_close(out: dict, ref: dict) -> None:
    for name in ref:
        tol = TOLERANCE[ref[name].dtype]
        np.testing.assert_allclose(
            out[name].astype(np.float64),
            ref[name].astype(np.float64),
            rtol=tol,
            atol=tol,
            err_msg=name,
        )


SOCS = {
    "resident, one core": {"vector_cores": 1},
    "resident": {},
    "streamed": {"ub_bytes": 2048},
}


def _shared_bytes(k: RowKernel) -> int:
    """Bytes of the operands every row reads (layer norm's scale and bias)."""
    return sum(
        k.row_length * s.dtype.itemsize for s in k.loads.values() if s.is_tile and not any(s.outer)
    )


@needs_cxx
@pytest.mark.parametrize("soc", sorted(SOCS))
def test_emulated_rows_equal_the_interpreter_and_move_the_estimated_bytes(soc):
    """Resident or streamed, the results equal the interpreter, and the bytes the
    emulation sees move through GlobalTensor are the estimate: on one core the minimum;
    on several, each core reads the shared operands once (the estimate counts them once:
    the later cores find them in L2)."""
    g = normalizations()
    p = build_project(g, soc=SocSpec.named("Ascend910B3", **SOCS[soc]))
    emu = Emulator(p)
    feeds = _feeds(seed=4)
    _assert_close(emu.run(feeds), mdsl.interpret(g, feeds))
    for pk in _row_kernels(p):
        k, measured = pk.kernel, emu.gm_traffic[pk.name]
        extra = (pk.tiling.block_dim - 1) * _shared_bytes(k) if k.resident else 0
        assert measured == gm_bytes(k) + extra, pk.name
        if k.resident and pk.tiling.block_dim == 1:
            assert measured == minimum_bytes(k, p.plan), pk.name
        assert k.resident == soc.startswith("resident"), pk.name


@needs_cxx
def test_a_resident_kernel_refuses_a_device_whose_ub_cannot_hold_the_row():
    """The host tiling of a resident kernel reads the device's UB size: too small, and the
    run fails with the kernel named instead of computing a row it cannot hold."""
    g = golden_graphs.golden_softmax()
    p = build_project(g)
    tiny = dataclasses.replace(p, soc=dataclasses.replace(p.soc, ub_bytes=256))
    feeds = {n: np.zeros(tuple(int(d) for d in t.shape), t.dtype.np) for n, t in g.inputs.items()}
    Emulator(p).run(feeds)
    with pytest.raises(mdsl.ExecutionError, match="k4_mul_softmax"):
        Emulator(tiny).run(feeds)  # the same build, on a device with a 256-byte UB
