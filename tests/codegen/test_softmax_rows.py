"""Softmax and log-softmax rows in C run as calls of the runtime's row helpers
(`mdsl.targets.c.softmax_rows`): equal to the interpreter for row lengths around the
vector width (tails), -inf and huge values, NaN, in place, fused input expressions and
symbolic rows; rows the helpers do not fit keep the generic loops."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.plan import build_plan
from mdsl.targets.c.render import render_c

LENGTHS = (1, 5, 16, 17, 63, 64, 65, 100, 128, 200)


def _rows(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((7, n)).astype(np.float32) * 4
    x[1, :: max(1, n // 3)] = -np.inf  # masked positions
    x[2] = -np.inf  # a fully masked row: NaN, as in numpy
    x[3, 0] = 3e38  # a huge value: the others underflow to 0
    x[4, -1] = np.nan
    x[4, 0] = np.nan  # the first: max_ps drops it from the max, the sum makes it NaN
    x[5] += 80.0  # large but finite everywhere
    x[6, n // 2] = np.inf
    return x


def _graph(n: int, symbolic: bool = False) -> mdsl.Graph:
    with mdsl.Graph(f"softmax_rows_{n}") as g:
        x = g.input("x", ("N", n) if symbolic else (7, n))
        mask = g.input("mask", (n,))
        g.output(ops.softmax(x, axis=-1), "softmax")
        g.output(ops.log_softmax(x, axis=-1), "log_softmax")
        g.output(ops.softmax(x * 0.5 + mask, axis=-1), "masked")
    return g


def _check(g: mdsl.Graph, feeds: dict) -> None:
    want = mdsl.compile(g, "python")(**feeds)
    got = mdsl.compile(g, "c", threads=1)(**feeds)
    # atol: log-softmax near 0 is -log(sum), and a float32 sum near 1 is off by up to an
    # ulp of 1 (1.2e-7) in either result (the interpreter's was, at n = 7)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=2e-6, atol=2.5e-7, err_msg=name)


@pytest.mark.parametrize("n", LENGTHS)
def test_softmax_rows_equal_the_interpreter(n):
    x = _rows(n, n)
    mask = np.where(np.arange(n) % 4 == 3, -np.inf, 0).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        _check(_graph(n), {"x": x, "mask": mask})


def test_symbolic_rows_and_several_threads():
    n = 77
    x, mask = _rows(n, 1), np.zeros(n, np.float32)
    g = _graph(n, symbolic=True)
    with np.errstate(invalid="ignore"):
        want = mdsl.compile(g, "python")(x=x, mask=mask)
    for threads in (1, 2):
        got = mdsl.compile(g, "c", threads=threads)(x=x, mask=mask)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=2e-6, atol=1e-7)


def test_the_kernels_call_the_helpers():
    source = render_c(build_plan(mdsl.optimize(_graph(100))))
    kernels = _kernels(source)
    assert kernels.count("mdsl_softmax_row_f32(") == 2
    assert kernels.count("mdsl_log_softmax_row_f32(") == 1
    assert "expf(" not in kernels


def test_a_softmax_over_a_strided_axis_keeps_the_generic_loops():
    with mdsl.Graph("softmax_axis0") as g:
        x = g.input("x", (33, 5))
        g.output(ops.softmax(x, axis=0), "y")
    source = render_c(build_plan(mdsl.optimize(g)))
    assert "mdsl_softmax_row_f32(" not in _kernels(source)
    x = np.random.default_rng(0).standard_normal((33, 5)).astype(np.float32)
    got, want = mdsl.compile(g, "c")(x=x)["y"], mdsl.compile(g, "python")(x=x)["y"]
    np.testing.assert_allclose(got, want, rtol=2e-6)


@pytest.mark.parametrize("n", [7, 65, 128])
@pytest.mark.parametrize("flags", ["-mno-avx512f", "-mno-avx2"], ids=["avx2", "portable"])
def test_the_avx2_and_portable_loops_equal_the_interpreter(flags, n, monkeypatch):
    """The helpers' loops for machines without AVX-512 (AVX2 intrinsics) and without AVX2
    (loops for the compiler), built here with those disabled."""
    monkeypatch.setenv("MDSL_CFLAGS", flags)
    x = _rows(n, 3)
    with np.errstate(invalid="ignore", over="ignore"):
        _check(_graph(n), {"x": x, "mask": np.zeros(n, np.float32)})


def _kernels(source: str) -> str:
    """The generated kernels: from the first kernel's comment ("/* k4_softmax: ...") on."""
    return source[re.search(r"/\* k\d+_", source).start() :]
