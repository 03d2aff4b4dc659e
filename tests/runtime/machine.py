"""What this machine's CPU lets oneDNN 3.2 do, for tests of plans that follow oneDNN's
choices. With AVX-512 its convolutions pick the nChw16c and NHWC brgconv kernels and its
matmul the brgemm kernels, and mdsl keeps tensors in nChw16c between them and prepacks
matmul weights for them. With AVX2 only (a Zen 3 core, say) its blocked layout is
nChw8c, which mdsl does not keep, and its matmul is `gemm:jit`, which mdsl does not route
to (its packed GEMM is faster): those plans are then not made, and the tests of them skip
with this reason; tests/runtime/test_avx2_builds.py runs the AVX2 kernels everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


HAS_AVX512 = "avx512f" in cpu_flags()
HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()

needs_avx512 = pytest.mark.skipif(
    not HAS_AVX512,
    reason="no AVX-512: oneDNN 3.2 picks neither nChw16c nor its brgemm matmul here, "
    "so mdsl does not make this plan (tests/runtime/machine.py)",
)
