"""What this machine's CPU lets oneDNN 3.2 do, for tests of plans that follow oneDNN's
choices. With AVX-512 its blocked layout is nChw16c and its matmul the brgemm kernels;
these tests are built around them (16-channel blocks: padded, whole or moved by hand;
matmul weights prepacked for brgemm). With AVX2 only (a Zen 3 core, say) the blocked
layout is nChw8c (mdsl keeps nChw8c chains too, and the light models run them) and the
matmul `gemm:jit`, which mdsl does not route to (its packed GEMM was no slower), so the
plans these tests check are not made there and they skip with this reason.
tests/runtime/test_avx2_builds.py runs the AVX2 forms of mdsl's own kernels everywhere."""

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


_FLAGS = cpu_flags()
HAS_AVX512 = "avx512f" in _FLAGS
HAS_AVX2 = {"avx2", "fma"} <= _FLAGS

needs_avx512 = pytest.mark.skipif(
    not HAS_AVX512,
    reason="no AVX-512: oneDNN 3.2 picks nChw8c and gemm:jit here, not the nChw16c or "
    "brgemm plan this test checks (tests/runtime/machine.py)",
)
