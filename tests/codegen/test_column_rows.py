"""Row kernels whose rows are strided run across their columns in C
(`mdsl.targets.c.column_rows`): reductions over an outer axis, softmax over NCHW's
channels and a layer norm over them equal the interpreter in float32 and float64, with
whole and partial blocks, rows whose dims do not merge, NaN in a maximum, and at 1 and
2 threads. Integer sums, contiguous rows and symbolic shapes keep the generic loops."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.plan import build_plan
from mdsl.targets.c.column_rows import MAX_LANES
from mdsl.targets.c.render import render_c
from tests.codegen.test_row_sums import _check


def _kernels(g: mdsl.Graph) -> str:
    source = render_c(build_plan(mdsl.optimize(g)))
    return source[source.index("\nstatic int k") :]


def _reduce(kind: str, shape, axes, dtype="float32") -> mdsl.Graph:
    with mdsl.Graph(f"column_{kind}") as g:
        x = g.input("x", shape, dtype=dtype)
        g.output(getattr(ops, f"reduce_{kind}")(x, axes=axes, keepdims=False), "y")
    return g


def _input(shape, dtype="float32", seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3 + 5).astype(dtype)


CASES = [
    ("sum", (300, 64), (0,)),  # one block of 64 lanes
    ("mean", (8, 37, 768), (1,)),  # 768 = 6 blocks of 128
    ("max", (3, 50, 131), (1,)),  # 131 lanes: a block of 128 and one of 3
    ("min", (4, 9, 200), (1,)),  # blocks of 40
    ("prod", (2, 6, 24), (1,)),
    ("sum", (5, 7, 12, 10), (1, 2)),  # the row's two dims merge
    ("mean", (6, 5, 7, 16), (0, 2)),  # they do not: j splits into j0, j1
]


@pytest.mark.parametrize("kind,shape,axes", CASES)
def test_reductions_over_outer_axes_run_across_columns(kind, shape, axes):
    g = _reduce(kind, shape, axes)
    assert "const int64_t lanes" in _kernels(g)
    x = _input(shape) if kind != "prod" else _input(shape) / 5
    _check(g, x)


@pytest.mark.parametrize("threads", [1, 2])
def test_float64_and_two_threads(threads):
    g = _reduce("mean", (40, 24, 160), (1,), "float64")
    assert "double r" in _kernels(g)
    _check(g, _input((40, 24, 160), "float64"), threads)
    _check(_reduce("sum", (512, 256), (0,)), _input((512, 256)), threads)


def test_a_nan_in_a_column_makes_that_maximum_nan():
    shape = (4, 30, 140)
    x = _input(shape)
    x[2, 17, 133] = np.nan
    x[1, 0, 5] = np.nan
    g = _reduce("max", shape, (1,))
    y = mdsl.compile(g, "c")(x=x)["y"]
    assert np.isnan(y[2, 133]) and np.isnan(y[1, 5]) and np.isnan(y).sum() == 2
    _check(g, x)


def test_softmax_and_layer_norm_over_channels():
    shape = (2, 19, 24, 24)
    with mdsl.Graph("channel_softmax") as g:
        g.output(ops.softmax(g.input("x", shape), axis=1), "y")
    assert "const int64_t lanes = 96;" in _kernels(g)  # H x W = 576 lanes, 6 blocks
    _check(g, _input(shape))
    with mdsl.Graph("channel_layer_norm") as g:
        x = g.input("x", (1, 96, 14, 14))
        scale = g.const("scale", np.linspace(0.5, 1.5, 96, dtype=np.float32).reshape(96, 1, 1))
        d = x - ops.reduce_mean(x, axes=(1,), keepdims=True)
        v = ops.reduce_mean(d * d, axes=(1,), keepdims=True)
        g.output(d / ops.sqrt(v + 1e-6) * scale + 0.25, "y")
    assert "lanes" in _kernels(g)
    for threads in (1, 2):
        _check(g, _input((1, 96, 14, 14)), threads)


def test_integer_sums_contiguous_rows_and_symbolic_shapes_keep_the_generic_loops():
    ints = _reduce("sum", (300, 64), (0,), "int32")
    assert "lanes" not in _kernels(ints)
    _check(ints, np.random.default_rng(1).integers(-9, 9, (300, 64)).astype(np.int32))
    assert "lanes" not in _kernels(_reduce("sum", (64, 300), (1,)))
    assert "lanes" not in _kernels(_reduce("sum", (300, 4), (0,)))  # under a vector wide
    symbolic = _reduce("mean", ("N", 64), (0,))
    for n in (1, 33):
        _check(symbolic, _input((n, 64)))


def test_block_width():
    from mdsl.targets.c.column_rows import columns, lanes

    def width(shape, axes):
        (k,) = build_plan(mdsl.optimize(_reduce("sum", shape, axes))).all_kernels()
        return lanes(columns(k))

    assert width((9, 96), (0,)) == 96
    assert width((9, 768), (0,)) == 128
    assert width((9, 200), (0,)) == 40
    assert width((9, 131), (0,)) == MAX_LANES
    # the last block of each row of 131 lanes runs 3 of them (its overrun would write the
    # next outer row's outputs, which that row's first block then overwrites in order)
    tail = "const int64_t lanes = 131 - o1 < 128 ? 131 - o1 : 128;"
    assert tail in _kernels(_reduce("max", (3, 50, 131), (1,)))
    assert width((3, 9, 4, 6), (1,)) == 24  # the trailing outer dims merged
