"""The C kernels' AVX2 forms, built with `-mno-avx512f` so that machines with AVX-512 run
them too: 8-float vectors and register blocks sized for AVX2's 16 registers in the packed
GEMM and convolution, the NCHW <-> NHWC moves and the Winograd kernel (GCC keeps vectors
wider than the ISA's on the stack: 3 x 32 GEMM tiles in 64-byte vectors ran at 2 GFLOP/s
on a Zen 3 core). Each case is one of the default build's tests, against the same
reference (PyTorch or the interpreter); softmax's AVX2 rows are in
tests/codegen/test_softmax_rows.py."""

from __future__ import annotations

import pytest

from mdsl.codegen import onednn, winograd
from tests.runtime import test_conv_gemm_kernels as gemm_tests
from tests.runtime import test_onednn_relayout as relayout_tests
from tests.runtime import test_winograd as winograd_tests
from tests.runtime.machine import HAS_AVX2

pytestmark = pytest.mark.skipif(not HAS_AVX2, reason="the CPU has no AVX2 and FMA")
needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)


@pytest.fixture(autouse=True)
def _avx2_build(monkeypatch):
    monkeypatch.setenv("MDSL_CFLAGS", "-mno-avx512f")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("key", ["m13-narrow", "m40-wide", "batch-of-rows"])
def test_the_packed_gemm(key, threads):
    gemm_tests.test_matmul_with_a_packed_constant_weight_equals_the_interpreter(key, threads)


@pytest.mark.parametrize("case", gemm_tests.DENSE[1:4], ids=["co16", "co13", "co25"])
def test_the_packed_convolution(case):
    gemm_tests.test_dense_conv_on_packed_weights_with_bias_and_relu_equals_torch(case, 2)


@needs_onednn
@pytest.mark.parametrize("batch, c, h, w, threads", [(2, 24, 7, 9, 1), (2, 40, 16, 20, 2)])
def test_the_moves_between_nchw_and_nhwc(batch, c, h, w, threads, capfd):
    relayout_tests.test_a_block_moved_between_nchw_and_nhwc_by_hand_equals_torch(
        batch, c, h, w, threads, capfd
    )


@needs_onednn
@pytest.mark.parametrize(
    "case",
    winograd_tests.CASES[2:],
    ids=["co48", "co64", "ci512", "co80", "shared-strips", "stack-strips", "81-tiles"],
)
def test_the_winograd_kernel(case, monkeypatch):
    monkeypatch.setattr(winograd, "MAX_EXPECTED_RATIO", float("inf"))  # as test_winograd's
    winograd_tests.test_winograd_conv_equals_torch_and_the_interpreter_at_1_and_2_threads(case)
