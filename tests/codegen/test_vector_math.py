"""float32 erf and tanh in generated C are polynomials (vectorizable), not libm calls:
within 6 ulp of the float64 truth over the whole range, exact at the special values.
A constant power 2 or 3 is products, not powf; other powers still call pow."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mdsl
from mdsl import ops

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 3e-4, 5e-4, 9.0], np.float32)


@pytest.fixture(scope="module")
def exe():
    with mdsl.Graph("vector_math") as g:
        x = g.input("x", (200_010,))
        g.output(ops.erf(x), "erf")
        g.output(ops.tanh(x), "tanh")
    return mdsl.compile(g, backend="c")


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    spacing = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - want) / spacing))


def test_erf_and_tanh_are_within_6_ulp_and_keep_special_values(exe):
    x = np.concatenate([np.linspace(-10, 10, 200_000, dtype=np.float32), SPECIAL])
    got = exe(x=x)
    wide = x.astype(np.float64)
    for name, truth in (("erf", np.vectorize(math.erf)(wide)), ("tanh", np.tanh(wide))):
        finite = np.isfinite(x)
        assert _ulps(got[name][finite], truth[finite]) <= 6, name
        assert np.isnan(got[name][np.isnan(x)]).all()
        np.testing.assert_array_equal(got[name][np.isinf(x)], np.sign(x[np.isinf(x)]))
        assert np.signbit(got[name][x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


def test_the_kernels_call_the_polynomials_not_libm():
    from mdsl.codegen.plan import build_plan
    from mdsl.targets.c.render import render_c

    with mdsl.Graph("erf_tanh") as g:
        x = g.input("x", (64,))
        g.output(ops.erf(x) + ops.tanh(x), "y")
    source = render_c(build_plan(mdsl.optimize(g)))
    kernels = source[source.index("/* k") :]
    assert "mdsl_erf_f32(" in kernels and "mdsl_tanh_f32(" in kernels
    assert "erff(" not in kernels and "tanhf(" not in kernels


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_square_and_cube_are_products_within_2_ulp(dtype):
    with mdsl.Graph("powers") as g:
        x = g.input("x", (1003,), dtype=dtype)
        e = g.input("e", (1003,), dtype=dtype)
        g.output(x**2.0, "square")
        g.output(x**3, "cube")
        g.output(x**2.5, "other")
        g.output(ops.abs(x) ** e, "tensor")  # an exponent only known at run time
    exe = mdsl.compile(g, backend="c")
    kernels = exe.sources[next(iter(exe.sources))].split("/* k", 1)[1]
    suffix = "f" if dtype == np.float32 else ""
    assert f"mdsl_pow2{suffix}(" in kernels and f"mdsl_pow3{suffix}(" in kernels
    x = np.concatenate([np.linspace(-50, 50, 993), SPECIAL]).astype(dtype)
    e = np.linspace(-2, 3, x.size).astype(dtype)
    got = exe(x=x, e=e)
    wide = x.astype(np.float64)
    for name, want in (("square", wide**2), ("cube", wide**3)):
        finite = np.isfinite(want) & (np.abs(want) > np.finfo(dtype).tiny)
        spacing = np.spacing(np.abs(want[finite]).astype(dtype)).astype(np.float64)
        ulps = np.abs(got[name][finite].astype(np.float64) - want[finite]) / spacing
        assert ulps.max() <= 2, name
        special = ~finite
        np.testing.assert_array_equal(got[name][special], want[special].astype(dtype))
        assert np.signbit(got[name][x == 0]).tolist() == np.signbit(want[x == 0]).tolist()
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got["other"], x ** dtype(2.5), rtol=1e-6, equal_nan=True)
        np.testing.assert_allclose(got["tensor"], np.abs(x) ** e, rtol=1e-6, equal_nan=True)
