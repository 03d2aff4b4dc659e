"""The C backend's output pool: large outputs reuse the memory of results the caller
dropped, and never memory the caller still holds (whole arrays, views, tensors, feeds);
pooled outputs and small constants start at a cache line."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl.targets.output_pool import MIN_BYTES, OutputPool
from tests.runtime.concurrency import run_concurrently

ROWS, COLS = 512, 1024  # 2 MiB of float32: a pooled output


@pytest.fixture(scope="module")
def exe():
    with mdsl.Graph("pooled") as g:
        x = g.input("x", (ROWS, COLS))
        g.output(x * 2.0 + 1.0, "y")
    return mdsl.compile(g, backend="c")


def _feed(value: float) -> np.ndarray:
    return np.full((ROWS, COLS), value, np.float32)


def test_a_held_output_is_not_overwritten_by_later_calls(exe):
    first = exe(x=_feed(1.0))["y"]
    later = [exe(x=_feed(float(v)))["y"] for v in range(2, 6)]
    assert np.all(first == 3.0)
    for v, y in zip(range(2, 6), later):
        assert np.all(y == 2.0 * v + 1.0)
        assert not np.shares_memory(y, first)


def test_a_dropped_output_is_reused(exe):
    addresses = set()
    for v in range(6):
        y = exe(x=_feed(float(v)))["y"]
        assert np.all(y == 2.0 * v + 1.0)
        addresses.add(y.ctypes.data)
        del y
    assert len(addresses) == 1


def test_the_previous_result_held_while_the_next_is_computed(exe):
    """`y = exe(...)` in a loop holds the last result during the call: two buffers take
    turns."""
    y = exe(x=_feed(0.0))["y"]
    addresses = set()
    for v in range(1, 7):
        previous = y
        y = exe(x=_feed(float(v)))["y"]
        assert np.all(previous == 2.0 * (v - 1) + 1.0)
        assert not np.shares_memory(previous, y)
        addresses.add(y.ctypes.data)
    assert len(addresses) == 2


def test_views_and_memoryviews_keep_the_memory_held(exe):
    view = exe(x=_feed(1.0))["y"][::2, 3:]  # the full array dropped at once
    memory = memoryview(exe(x=_feed(2.0))["y"])
    flat = np.asarray(exe(x=_feed(3.0))["y"]).reshape(-1)
    for v in range(4, 8):
        exe(x=_feed(float(v)))
    assert np.all(view == 3.0) and np.all(np.asarray(memory) == 5.0) and np.all(flat == 7.0)


def test_an_output_fed_back_as_the_input(exe):
    y = _feed(0.5)
    want = y.copy()
    for _ in range(5):
        y = exe(x=y)["y"]
        want = want * 2.0 + 1.0
    np.testing.assert_array_equal(y, want)


def test_symbolic_outputs_are_pooled_and_held_ones_kept():
    with mdsl.Graph("pooled_symbolic") as g:
        x = g.input("x", (mdsl.Dim("N"), COLS))
        g.output(x + 1.0, "y")
    exe = mdsl.compile(g, backend="c")
    big = exe(x=np.zeros((ROWS, COLS), np.float32))["y"]
    small = exe(x=np.ones((ROWS // 2 + 1, COLS), np.float32))["y"]
    assert not np.shares_memory(big, small)
    assert np.all(big == 1.0) and np.all(small == 2.0)
    address = small.ctypes.data
    del small
    again = exe(x=np.full((ROWS // 2 + 1, COLS), 2.0, np.float32))["y"]
    assert again.ctypes.data == address and np.all(again == 3.0)


def test_threads_keep_their_results(exe):
    results = run_concurrently(
        lambda i: [exe(x=_feed(float(10 * i + c)))["y"] for c in range(6)], 3
    )
    for i, ys in enumerate(results):
        for c, y in enumerate(ys):
            assert np.all(y == 2.0 * (10 * i + c) + 1.0)


def test_small_and_object_outputs_are_fresh_arrays():
    pool = OutputPool()
    small = pool.array(0, (4,), np.float32)
    assert small.nbytes < MIN_BYTES and pool.held_bytes() == 0
    objects = pool.array(1, (MIN_BYTES,), object)
    assert objects.dtype == object and pool.held_bytes() == 0


def test_pooled_outputs_start_at_a_cache_line(exe):
    """numpy's own large arrays start 16 bytes into a page: stores split across lines."""
    held = [exe(x=_feed(float(v)))["y"] for v in range(3)]  # new buffers, then reused ones
    del held[0]
    held.append(exe(x=_feed(9.0))["y"])
    assert [y.ctypes.data % 64 for y in held] == [0, 0, 0]
    assert np.all(held[-1] == 19.0)


def test_small_constants_are_copied_to_a_cache_line_and_large_ones_are_not():
    from mdsl.targets.c.backend import SMALL_CONSTANT_BYTES, _constant

    small = np.arange(769, dtype=np.float32)[1:]  # 4 bytes into its buffer
    got = _constant(small)
    assert got.ctypes.data % 64 == 0 and np.array_equal(got, small) and got.dtype == small.dtype
    large = np.ones(SMALL_CONSTANT_BYTES // 4 + 1, np.float32)[1:]
    assert np.shares_memory(_constant(large), large)  # a model's weights are not held twice
    empty = np.empty((0, 3), np.float64)
    assert _constant(empty).shape == (0, 3)
