"""float32 erf and tanh in generated C are polynomials (vectorizable), not libm calls:
within 6 ulp of the float64 truth over the whole range, exact at the special values.
The exact GELU is one helper with the same rational (mdsl_gelu_f32). A constant power 2
or 3 is products, not powf; other powers still call pow."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.c_library import gcc_compile

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 3e-4, 5e-4, 9.0], np.float32)
# erf's rational multiplied its numerator by x first, which went subnormal below about
# 1e-37 and lost up to 37 ulp
TINY = np.array([3e-38, -1e-38, -1e-39, 1e-45], np.float32)


@pytest.fixture(scope="module")
def exe():
    with mdsl.Graph("vector_math") as g:
        x = g.input("x", (200_000 + len(SPECIAL) + len(TINY),))
        g.output(ops.erf(x), "erf")
        g.output(ops.tanh(x), "tanh")
    return mdsl.compile(g, backend="c")


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    spacing = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - want) / spacing))


def test_erf_and_tanh_are_within_6_ulp_and_keep_special_values(exe):
    x = np.concatenate([np.linspace(-10, 10, 200_000, dtype=np.float32), SPECIAL, TINY])
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


# -- the exact GELU: one helper call (mdsl_gelu_f32) -------------------------------------------------
GELU_N = 100_003  # parallel at 2 threads, and not a multiple of any vector width
GELU_EDGE = 5.5425944  # from here on erf(x / sqrt2) is +-1 in float32


def _gelu_graph(n: int, dtype=np.float32) -> mdsl.Graph:
    with mdsl.Graph(f"gelu_{n}") as g:
        x = g.input("x", (n,), dtype=dtype)
        g.output(ops.gelu(x, approximate="none"), "y")
    return g


def _gelu_inputs(n: int) -> np.ndarray:
    """Every kind of float32: a dense grid where GELU bends, random bit patterns (tiny,
    denormal, huge), the edge where erf rounds to +-1 and the special values."""
    f32 = np.float32
    edge = [
        f32(GELU_EDGE),
        np.nextafter(f32(GELU_EDGE), f32(0)),
        np.nextafter(f32(GELU_EDGE), f32(9)),
    ]
    special = np.array([*edge, *(-e for e in edge), np.finfo(f32).tiny, 1e-40, 3e38], f32)
    return _grid_random_special(n, (-12, 12), np.concatenate([special, -special, SPECIAL]), 7)


def _grid_random_special(n: int, span: tuple, special: np.ndarray, seed: int) -> np.ndarray:
    """n float32s: a grid over `span`, n // 4 random bit patterns (finite ones: NaN and inf
    are among the special values) and `special`."""
    bits = np.random.default_rng(seed).integers(0, 2**32, n // 4, dtype=np.uint64)
    random = bits.astype(np.uint32).view(np.float32)
    random = random[np.isfinite(random)]
    grid = np.linspace(*span, n - random.size - special.size, dtype=np.float32)
    return np.concatenate([grid, random, special])


def _gelu_truth(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return 0.5 * wide * (1.0 + np.vectorize(math.erf)(wide / math.sqrt(2.0)))


@pytest.fixture(scope="module")
def gelu_runs():
    """The inputs and the outputs at 1 thread, and of four calls at 2 threads (the first
    calls of a library try both team sizes)."""
    x = _gelu_inputs(GELU_N)
    g = _gelu_graph(GELU_N)
    one = mdsl.compile(g, backend="c", threads=1)(x=x)["y"]
    two = mdsl.compile(g, backend="c", threads=2)
    return x, g, one, [two(x=x)["y"] for _ in range(4)]


def test_exact_gelu_is_one_helper_call_for_float32_only():
    f32 = mdsl.compile(_gelu_graph(64), backend="c").sources
    kernels = next(iter(f32.values())).split("/* k", 1)[1]
    assert "mdsl_gelu_f32(" in kernels and "mdsl_erf_f32(" not in kernels
    f64 = mdsl.compile(_gelu_graph(64, np.float64), backend="c").sources
    kernels = next(iter(f64.values())).split("/* k", 1)[1]
    assert "mdsl_gelu_f32(" not in kernels and "erf(" in kernels


def test_exact_gelu_is_accurate_over_the_whole_float_range(gelu_runs):
    """Within 6 ulp where GELU is well conditioned (x >= -1; below, 1 + erf cancels) and
    3e-7 of max(1, |x|) everywhere: bounds the composition 0.5 x (1 + mdsl_erf_f32(x /
    sqrt2)) that the helper replaced kept as well (over every float32 in [-6, 6] the helper
    is the more accurate one, by max ulp and by max abs error, in each of [-6, -3],
    [-3, -1], [-1, 0], [0, 1] and [1, 6]); a broken coefficient or edge fails them."""
    x, _, got, _ = gelu_runs
    truth = _gelu_truth(x)
    finite = np.isfinite(x) & np.isfinite(truth)
    err = np.abs(got[finite].astype(np.float64) - truth[finite])
    assert np.max(err / np.maximum(1.0, np.abs(x[finite]))) <= 3e-7
    calm = finite & (x >= -1.0) & (np.abs(truth) >= np.finfo(np.float32).tiny)
    assert _ulps(got[calm], truth[calm]) <= 6


def test_exact_gelu_keeps_the_references_values_at_the_edges(gelu_runs):
    x, g, got, _ = gelu_runs
    beyond = np.isfinite(x) & (np.abs(x) >= np.float32(GELU_EDGE))
    positive, negative = beyond & (x > 0), beyond & (x < 0)
    np.testing.assert_array_equal(got[positive], x[positive])  # x * Phi(x), Phi == 1
    assert (got[negative] == 0).all() and np.signbit(got[negative]).all()  # 0.5 x * 0 is -0
    assert np.isnan(got[np.isnan(x)]).all()
    assert got[x == np.inf].tolist() == [np.inf] and np.isnan(got[x == -np.inf]).all()
    tiny = np.isfinite(x) & (np.abs(x) < 1e-30)  # 0.5 x, rounded once
    np.testing.assert_array_equal(got[tiny], np.float32(0.5) * x[tiny])
    np.testing.assert_array_equal(np.signbit(got[x == 0]), np.signbit(x[x == 0]))
    with np.errstate(invalid="ignore"):  # -inf gives NaN: 0.5 x * (1 + erf) is -inf * 0
        reference = mdsl.interpret(g, {"x": x})["y"]
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_exact_gelu_is_the_same_on_two_threads_and_in_short_tails(gelu_runs):
    x, _, one, two = gelu_runs
    for result in two:
        np.testing.assert_array_equal(result, one)
    short = mdsl.compile(_gelu_graph(13), backend="c")(x=x[-13:])["y"]  # the tail alone
    np.testing.assert_array_equal(short, one[-13:])


def test_the_gelu_form_is_recognized_only_with_the_same_x_throughout():
    from mdsl import expr as E
    from mdsl.ir.dtype import DType
    from mdsl.targets.c.expr import CExprRenderer

    x, y = E.var("x"), E.var("y")
    render = CExprRenderer({"x": DType.float32, "y": DType.float32}).render
    sqrt2 = math.sqrt(2.0)
    assert render(0.5 * x * (1.0 + E.erf(x / sqrt2))) == "mdsl_gelu_f32(x)"
    assert render((1.0 + E.erf(x * (1 / sqrt2))) * (x * 0.5)) == "mdsl_gelu_f32(x)"
    assert render(0.5 * (x + y) * (1.0 + E.erf((x + y) / sqrt2))) == "mdsl_gelu_f32((x + y))"
    for other in (0.5 * y * (1.0 + E.erf(x / sqrt2)), 0.5 * x * (1.0 + E.erf(x / 1.5))):
        assert "mdsl_gelu_f32" not in render(other)


# -- sigmoid: exp(-|x|) inline (mdsl_sigmoidf) ---------------------------------------------------------
SIGMOID_N = 400_003  # parallel at 2 threads, and not a multiple of any vector width


def _sigmoid_inputs(n: int) -> np.ndarray:
    """A dense grid over where sigmoid is not 0 or 1 in float32, random bit patterns, the
    edges of the underflow cut and the special values."""
    f32 = np.float32
    cut = [f32(-87.33654), np.nextafter(f32(-87.33654), f32(0)), f32(-88.8), f32(-104.0)]
    return _grid_random_special(
        n, (-110, 40), np.concatenate([np.array(cut, f32), SPECIAL, TINY]), 11
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_sigmoid_is_within_3_ulp_and_keeps_special_values(threads):
    """Within 3 ulp of the float64 sigmoid where that is a normal float32 (numpy's float32
    1 / (1 + exp(-x)) is within 3.4), and within 2^-126 below, where the helper gives 0; a
    wrong coefficient, a dropped reduction term or a wrong branch fails it."""
    x = _sigmoid_inputs(SIGMOID_N)
    with mdsl.Graph("sigmoid") as g:
        g.output(ops.sigmoid(g.input("x", x.shape)), "y")
    exe = mdsl.compile(g, backend="c", threads=threads)
    kernels = next(iter(exe.sources.values())).split("/* k", 1)[1]
    assert "mdsl_sigmoidf(" in kernels and "expf(" not in kernels
    got = exe(x=x)["y"]
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):
        truth = 1.0 / (1.0 + np.exp(-wide))
    tiny = np.finfo(np.float32).tiny
    finite = np.isfinite(x)
    normal = finite & (truth >= tiny)
    assert _ulps(got[normal], truth[normal]) <= 3
    assert np.abs(got[finite & ~normal] - truth[finite & ~normal]).max() <= tiny
    assert np.isnan(got[np.isnan(x)]).all()
    assert got[x == np.inf].tolist() == [1.0] and got[x == -np.inf].tolist() == [0.0]
    assert (got[x == 0] == 0.5).all()


def test_a_sigmoid_followed_by_a_relu_still_vectorizes(tmp_path):
    """With e = 0 as a select for -|x| below -88, GCC threaded the Relu's max through the
    branch where sigmoid is the constant 0 and vectorized nothing (W7's chain: 3.2 us a
    call instead of 2.5); the clamp keeps the loop a vector loop. Compiled with the
    target's own flags, asking GCC which loops it vectorized."""
    with mdsl.Graph("sigmoid_relu") as g:
        x = g.input("x", (16,))
        y = ops.relu(ops.sigmoid(ops.tanh(x) + x) - 0.25) * x
        g.output(ops.relu(ops.sigmoid(ops.tanh(y) + x) - 0.25), "y")
    source = next(iter(mdsl.compile(g, backend="c", threads=1).sources.values()))
    report = tmp_path / "vectorized.txt"
    path = gcc_compile(tmp_path, source, f"-fopt-info-vec-optimized={report}")
    rows = path.read_text().splitlines()
    kernel_line = 1 + next(i for i, row in enumerate(rows) if row.startswith("static int k"))
    lines = {
        int(m)
        for m in re.findall(r"unit\.c:(\d+):\d+: optimized: loop vectorized", report.read_text())
    }
    assert any(kernel_line < line <= kernel_line + 3 for line in lines), report.read_text()
