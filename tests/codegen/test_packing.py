"""Weights packed at plan time: the layouts the C kernels read, element by element."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.packing import CONV_PANEL, PANEL, pack_conv_panels, pack_panels


@pytest.mark.parametrize("n", [1, 7, PANEL, PANEL + 9, 2 * PANEL, 3 * PANEL])
@pytest.mark.parametrize("order", ["C", "F"])
def test_gemm_panels_hold_each_column_block_row_by_row_zero_padded(n, order):
    b = np.asarray(np.random.default_rng(n).normal(size=(5, n)), np.float32, order=order)
    packed = pack_panels(b)
    panels = -(-n // (2 * PANEL)) * 2  # an even count: an AVX-512 tile reads two panels
    assert packed.shape == (panels * 5 * PANEL,)
    for k in range(5):
        for j in range(panels * PANEL):
            want = b[k, j] if j < n else 0.0
            assert packed[((j // PANEL) * 5 + k) * PANEL + j % PANEL] == want


@pytest.mark.parametrize("cout", [1, CONV_PANEL, CONV_PANEL + 5])
def test_conv_panels_hold_each_tap_channel_block_zero_padded(cout):
    w = np.random.default_rng(cout).normal(size=(cout, 3, 2, 2)).astype(np.float32)
    packed = pack_conv_panels(w)
    kdim, panels = 3 * 2 * 2, -(-cout // CONV_PANEL)
    assert packed.shape == (panels * kdim * CONV_PANEL,)
    flat = w.reshape(cout, kdim)
    for co in range(panels * CONV_PANEL):
        for k in range(kdim):
            want = flat[co, k] if co < cout else 0.0
            assert packed[((co // CONV_PANEL) * kdim + k) * CONV_PANEL + co % CONV_PANEL] == want


def test_kernels_packing_one_weight_share_one_packed_copy():
    """ALBERT's layers share their weights: each GEMM packing them made its own copy (339
    MiB of constants from 42), read from memory layer after layer. Three GEMMs of one
    weight now read one packed buffer, and a fourth of another weight its own."""
    rng = np.random.default_rng(0)
    w, v = (rng.normal(size=(64, 64)).astype(np.float32) for _ in range(2))
    with mdsl.Graph("shared_weight") as g:
        x = g.input("x", (16, 64))
        shared = g.const("w", w)
        y = ops.matmul(ops.relu(ops.matmul(ops.relu(ops.matmul(x, shared)), shared)), shared)
        g.output(ops.matmul(y, g.const("v", v)), "y")
    exe = mdsl.compile(g, "c")
    copies = [c for c in exe.plan.constants if c.shape == pack_panels(w).shape]
    assert sum(np.array_equal(c, pack_panels(w)) for c in copies) == 1
    assert sum(np.array_equal(c, pack_panels(v)) for c in copies) == 1
    x_value = rng.normal(size=(16, 64)).astype(np.float32)
    want = mdsl.compile(g, "python")(x=x_value)["y"]
    np.testing.assert_allclose(exe(x=x_value)["y"], want, rtol=1e-4, atol=1e-4)
