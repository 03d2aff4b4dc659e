"""Pointwise loop nests that read an input as a transpose (down a column in the innermost
loop, along its rows in the next) run in square tiles (`render.TRANSPOSE_TILE`): equal to
numpy for sizes that are not whole tiles, outer dims, fused expressions, other dtypes and
two threads; loop nests that do not transpose keep their loops."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.plan import build_plan
from mdsl.targets.c.render import TRANSPOSE_TILE, render_c

CASES = [
    # (shape, perm, dtype)
    ((1, 100, 70), (0, 2, 1), "float32"),  # neither side whole tiles
    ((3, 40, 33, 50), (0, 3, 1, 2), "float32"),  # channels last to first: an outer dim
    ((96, 64), (1, 0), "int64"),
    ((2, 3, 64, 48), (0, 1, 3, 2), "float64"),  # two outer dims
]


def _graph(shape, perm, dtype) -> mdsl.Graph:
    with mdsl.Graph("transposed") as g:
        x = g.input("x", shape, dtype=dtype)
        y = ops.transpose(x, perm=perm)
        g.output(y, "y")
        g.output(ops.transpose(x * x, perm=perm), "squared")  # a fused expression
    return g


@pytest.mark.parametrize("shape, perm, dtype", CASES, ids=lambda c: str(c))
def test_tiled_transposes_equal_numpy(shape, perm, dtype):
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 100).astype(dtype)
    g = _graph(shape, perm, dtype)
    assert f"+= {TRANSPOSE_TILE})" in render_c(build_plan(mdsl.optimize(g)))
    for threads in (1, 2):
        got = mdsl.compile(g, "c", threads=threads)(x=x)
        np.testing.assert_array_equal(got["y"], x.transpose(perm))
        np.testing.assert_array_equal(got["squared"], (x * x).transpose(perm))


def test_small_and_contiguous_loops_are_not_tiled():
    small = _graph((1, 20, 70), (0, 2, 1), "float32")  # a side shorter than a tile
    assert f"+= {TRANSPOSE_TILE})" not in render_c(build_plan(mdsl.optimize(small)))
    with mdsl.Graph("plain") as g:
        g.output(g.input("x", (256, 256)) * 2.0, "y")
    assert f"+= {TRANSPOSE_TILE})" not in render_c(build_plan(mdsl.optimize(g)))


def test_a_symbolic_outer_dim_stays_outside_the_tiles():
    g = _graph(("N", 100, 70), (0, 2, 1), "float32")
    exe = mdsl.compile(g, "c", threads=2)
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 100, 70)).astype(np.float32)
        np.testing.assert_array_equal(exe(x=x)["y"], x.transpose(0, 2, 1))
