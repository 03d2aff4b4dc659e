"""The packed GEMM's tile walk in its AVX-512 form on any x86 machine: the template built
with `__AVX512F__` defined by hand, so that its 12 x 32 tiles (two adjacent 16-column
panels, read as two streams) run in GCC's generic 64-byte vectors, which GCC emulates
without AVX-512 (slowly; only the indexing is tested here). The default build's tests
run the form of the machine's own ISA (tests/runtime/test_conv_gemm_kernels.py), and
tests/runtime/test_avx2_builds.py the AVX2 form."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from mdsl.codegen.packing import PANEL, TILE_ALIGN, pack_panels
from mdsl.codegen.templates import template_environment
from tests.c_library import load_c

HARNESS = """
#define __AVX512F__ 1  /* the AVX-512 form's constants and walk, in generic vectors */
#include <stdint.h>
{gemm}
void run(int64_t M, int64_t n0, int64_t N, int64_t K, const float *a, int64_t lda,
         const float *packed, float *c, int64_t ldc) {{
    mdsl_sgemm_packed(M, n0, N, K, a, lda, packed, c, ldc);
}}
"""


@pytest.fixture(scope="module")
def avx512_form(tmp_path_factory):
    gemm = template_environment("c").get_template("packed_gemm.h.j2").render()
    folder = tmp_path_factory.mktemp("packed_gemm_avx512")
    run = load_c(folder, HARNESS.format(gemm=gemm), ["-O1", "-Wno-psabi"]).run
    run.argtypes = [ctypes.c_int64] * 4 + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    run.argtypes += [ctypes.c_void_p, ctypes.c_int64]
    return run


# (M, K, N, first column): one partial panel; a tile of one full and one partial panel;
# several tiles with a tail; rows past a 12-row tile; a slice of columns from a tile's start
CASES = [(5, 70, 7, 0), (13, 64, 40, 0), (25, 96, 300, 0), (3, 128, 33, 0), (14, 80, 100, 64)]


@pytest.mark.parametrize("m, k, n, n0", CASES)
def test_the_avx512_tile_walk_equals_numpy(avx512_form, m, k, n, n0):
    assert PANEL == 16 and TILE_ALIGN == 32 and n0 % TILE_ALIGN == 0
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    packed = pack_panels(b)
    c = np.full((m, n), np.nan, np.float32)
    columns = n - n0
    avx512_form(m, n0, columns, k, a.ctypes.data, k, packed.ctypes.data, c.ctypes.data, n)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c[:, n0:], want[:, n0:], rtol=1e-5, atol=1e-4)
    assert np.isnan(c[:, :n0]).all()  # columns before n0 untouched
