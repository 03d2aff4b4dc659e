"""Pad in mode edge, reflect or wrap over sizes known only at run time, compiled for C
(`runtime_sizes_pad` in `mdsl/ops/runtime_sizes.c`): no callback, results equal to the
interpreter's and numpy.pad's (ONNX's reference) over crops, pads wider than the input,
several axes, int and float dtypes; an empty axis to pad fails the run naming the node."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl

MODES = ["edge", "reflect", "wrap"]


def _sliced_pad_graph(shape, dtype, pads, mode) -> mdsl.Graph:
    """x[starts:ends] (its dims known only when it runs), padded."""
    rank = len(shape)
    with mdsl.Graph("sliced_pad") as g:
        x = g.input("x", shape, dtype)
        s, e = g.input("s", (rank,), "int64"), g.input("e", (rank,), "int64")
        y = mdsl.ops.dynamic_slice(x, s, e)
        g.output(mdsl.ops.pad(y, pads, mode=mode, name="border"), "y")
    return g


def _expected(x, starts, ends, pads, mode):
    part = x[tuple(slice(s, e) for s, e in zip(starts, ends))]
    half = len(pads) // 2
    crop = tuple(
        slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(part.shape, pads[:half], pads[half:])
    )
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(pads[:half], pads[half:])]
    return np.pad(part[crop], widths, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_a_border_pad_of_run_time_sizes_equals_the_interpreter_and_numpy(mode, dtype):
    x = np.arange(6 * 7 * 3).reshape(6, 7, 3).astype(dtype)
    pads = [1, 5, -1, 2, 0, 2]  # axis 1 padded wider than the slice; axis 2 cropped
    g = _sliced_pad_graph((6, 7, 3), dtype, pads, mode)
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    for starts, ends in [((0, 0, 0), (6, 7, 3)), ((1, 2, 0), (4, 5, 3)), ((5, 6, 1), (6, 7, 3))]:
        feeds = {"x": x, "s": np.array(starts), "e": np.array(ends)}
        want = _expected(x, starts, ends, pads, mode)
        got, ref = exe(**feeds)["y"], mdsl.interpret(g, feeds)["y"]
        assert got.shape == ref.shape == want.shape, (starts, ends)
        np.testing.assert_array_equal(got, want, err_msg=str((starts, ends)))
        np.testing.assert_array_equal(ref, want, err_msg=str((starts, ends)))


@pytest.mark.parametrize("mode", MODES)
def test_a_border_pad_over_a_symbolic_feed_dim_is_one_c_call(mode):
    with mdsl.Graph("pad_n") as g:
        g.output(mdsl.ops.pad(g.input("x", ("N",)), [3, 4], mode=mode), "y")
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    for n in (1, 2, 5):
        x = np.arange(n, dtype=np.float32) + 1
        np.testing.assert_array_equal(exe(x=x)["y"], np.pad(x, (3, 4), mode=mode))


def test_padding_an_empty_run_time_axis_fails_naming_the_node():
    g = _sliced_pad_graph((4, 3), "float32", [1, 0, 1, 0], "edge")
    exe = mdsl.compile(g, backend="c")
    feeds = {"x": np.zeros((4, 3), np.float32), "s": np.array([2, 0]), "e": np.array([2, 3])}
    with pytest.raises(mdsl.ExecutionError, match="border"):
        exe(**feeds)
