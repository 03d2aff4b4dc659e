"""`mdsl_exp_nonpos8` (vector_exp.h.j2), the AVX2 exp of softmax's rows, against float64
over a sweep of [-87.33, 0] and its edges. Softmax divides a systematic error away and
its row tests would not see a wrong coefficient; the exp is checked on its own here.
Built with `-mavx2 -mfma` so machines with AVX-512 run this form too."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from mdsl.codegen.templates import template_environment
from tests.c_library import load_c
from tests.runtime.machine import HAS_AVX2

pytestmark = pytest.mark.skipif(not HAS_AVX2, reason="the CPU has no AVX2 and FMA")

HARNESS = """
#include <stdint.h>
{exp}
void run(const float *x, float *y, int64_t n) {{
    for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, mdsl_exp_nonpos8(_mm256_loadu_ps(x + i)));
}}
"""


@pytest.fixture(scope="module")
def exp8(tmp_path_factory):
    source = template_environment("c").get_template("vector_exp.h.j2").render()
    library = load_c(
        tmp_path_factory.mktemp("vector_exp"),
        HARNESS.format(exp=source),
        ["-O2", "-mavx2", "-mfma"],
    )
    run = library.run
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]

    def exp(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        assert x.size % 8 == 0, "the harness runs whole vectors of 8"
        y = np.empty_like(x)
        run(x.ctypes.data, y.ctypes.data, x.size)
        return y

    return exp


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got.astype(np.float64) - want) / np.spacing(want.astype(np.float32))


def test_the_avx2_exp_is_within_1_ulp_down_to_minus_8(exp8):
    x = -np.random.default_rng(0).uniform(0, 8, 1 << 20).astype(np.float32)
    x = np.concatenate([x, np.linspace(-1, 0, 1 << 16, dtype=np.float32)])
    assert _ulps(exp8(x), np.exp(x.astype(np.float64))).max() <= 1.0


def test_below_minus_8_the_error_grows_with_the_reduction_by_a_rounded_ln2(exp8):
    # r = x - k ln 2 with ln 2 rounded to float: |k| 1.9e-9 more, 0.045|x| ulp at most
    x = -np.random.default_rng(1).uniform(8, 87.33, 1 << 20).astype(np.float32)
    ulps = _ulps(exp8(x), np.exp(x.astype(np.float64)))
    assert (ulps <= 1.0 + 0.045 * np.abs(x)).all()


def test_the_avx2_exp_edges(exp8):
    x = np.array([0.0, -0.0, -1e-30, -87.3, -87.5, -87.7, -100.0, -np.inf, np.nan], np.float32)
    y = exp8(np.resize(x, 16))  # whole vectors of 8
    assert y[0] == 1.0 and y[1] == 1.0 and y[2] == 1.0
    # -87.5: k = -126 and a subnormal result, close to exp; below -126.5 ln 2 (-87.68), 0
    np.testing.assert_allclose(y[3:5], np.exp(x[3:5].astype(np.float64)), rtol=1e-6)
    assert y[5] == 0.0 and y[6] == 0.0 and y[7] == 0.0
    assert np.isnan(y[8])
