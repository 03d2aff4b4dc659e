"""Resize over symbolic dims on C (`mdsl/ops/resizing.c`): one build serves every input
size, with the taps computed when it runs; results equal the interpreter's (the same
steps in double) for every mode, coordinate transformation, nearest rounding, cubic
option, scales and sizes, axis order and dtype the static Resize kernels support."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl.ops.resizing import COORDINATE_MODES, NEAREST_MODES

SIZES = [(5, 7), (1, 1), (16, 3)]  # the input's H, W per call


def _assert_native_and_equal(shape, dtype, rtol=0.0, **attrs):
    """`rtol`: interpolation sums may contract to fused multiply-adds in C."""
    with mdsl.Graph("resize") as g:
        x = g.input("x", shape, dtype)
        g.output(mdsl.ops.resize(x, **attrs), "y")
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    rng = np.random.default_rng(0)
    for h, w in SIZES:
        feeds = {"x": (rng.standard_normal((2, 3, h, w)) * 50).astype(dtype)}
        got, want = exe(**feeds)["y"], mdsl.interpret(g, feeds)["y"]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0)
    assert list(exe.variants()) == [()]


@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize("nearest", NEAREST_MODES)
def test_nearest_resize_to_sizes(coordinates, nearest):
    _assert_native_and_equal(
        (2, 3, "H", "W"),
        "float32",
        sizes=(6, 4),
        axes=(2, 3),
        mode="nearest",
        coordinate_transformation_mode=coordinates,
        nearest_mode=nearest,
    )


@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_interpolating_resize_by_scales(coordinates, mode):
    _assert_native_and_equal(
        (2, 3, "H", "W"),
        "float32",
        1e-6,
        scales=(1.0, 1.0, 2.5, 0.5),
        mode=mode,
        coordinate_transformation_mode=coordinates,
    )


@pytest.mark.parametrize("exclude_outside", [False, True])
def test_cubic_resize_with_its_options_in_float64_and_reversed_axes(exclude_outside):
    _assert_native_and_equal(
        (2, 3, "H", "W"),
        "float64",
        1e-12,
        sizes=(3, 9),
        axes=(3, 2),  # W resized first, as the reference does
        mode="cubic",
        cubic_coeff_a=-0.5,
        exclude_outside=exclude_outside,
    )


@pytest.mark.parametrize("dtype", ["int32", "float16", "uint8"])
def test_nearest_resize_copies_any_dtype(dtype):
    _assert_native_and_equal((2, 3, "H", "W"), dtype, scales=(1.0, 1.0, 2.0, 3.0), mode="nearest")


def test_a_symbolic_batch_with_static_spatial_sizes_resizes_natively():
    with mdsl.Graph("resize") as g:
        x = g.input("x", ("N", 2, 4, 4))
        g.output(mdsl.ops.resize(x, scales=(1.0, 1.0, 2.0, 2.0), mode="linear"), "y")
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == []
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 2, 4, 4)).astype(np.float32)
        want = mdsl.interpret(g, {"x": x})["y"]
        np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-6, atol=1e-6)
