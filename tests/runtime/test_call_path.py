"""The call path: feeds that are exactly what the graph declares (a dict of ndarrays of
the declared dtypes and shapes, the symbols in range) go straight to the compiled
variant; every other feed goes through `bind_feeds`, which converts it or says what is
wrong. Both paths must give the same outputs, equal to the interpreter's, for static
graphs and for the symbolic build of symbolic ones."""

from __future__ import annotations

import types

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.runtime import executable
from tests.runtime.concurrency import run_concurrently

BACKENDS_THREADS = [("c", 1), ("c", 2), ("numba", 1)]


ROWS = mdsl.Dim("N", max=9)


def _graph(rows=5) -> mdsl.Graph:
    """A chain of small ops over two float32 inputs of odd sizes and an int32 one,
    with three outputs (one of them an input passed through); `rows`: x's first dim."""
    with mdsl.Graph("call_path") as g:
        x = g.input("x", (rows, 7))
        bias = g.input("bias", (7,))
        steps = g.input("steps", (3,), "int32")
        h = x
        for _ in range(4):
            h = ops.sigmoid(ops.tanh(h * 0.9 + bias) - 0.25) * x
            h = ops.neg(ops.abs(ops.relu(h) + x))
        g.output(h, "y")
        g.output(steps * 3 + 1, "counts")
        g.output(bias, "bias_out")
    return g


def _feeds(seed: int = 0, rows: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((rows, 7)).astype(np.float32),
        "bias": rng.standard_normal(7).astype(np.float32),
        "steps": rng.integers(-100, 100, 3).astype(np.int32),
    }


@pytest.fixture(scope="module", params=BACKENDS_THREADS, ids=lambda p: f"{p[0]}-{p[1]}T")
def exe(request):
    backend, threads = request.param
    return mdsl.compile(_graph(), backend=backend, threads=threads)


def _assert_like_interpreter(out: dict, feeds) -> None:
    want = mdsl.interpret(_graph(), dict(feeds))
    assert list(out) == list(want)
    for name, value in want.items():
        assert out[name].dtype == value.dtype and out[name].shape == value.shape
        np.testing.assert_allclose(out[name], value, rtol=2e-6, atol=1e-7, err_msg=name)


def test_matching_feeds_skip_the_feed_binding_and_match_the_interpreter(exe, monkeypatch):
    feeds = _feeds()
    checked = exe.run(types.MappingProxyType(feeds))  # not a dict: the checked path

    def unexpected(*args):
        raise AssertionError("feeds that match the graph were bound again")

    monkeypatch.setattr(executable, "bind_feeds", unexpected)
    fast = exe.run(feeds)
    assert fast.keys() == checked.keys()
    for name in fast:  # the same variant runs: the same bits
        np.testing.assert_array_equal(fast[name], checked[name], err_msg=name)
    _assert_like_interpreter(fast, feeds)
    _assert_like_interpreter(exe(**_feeds(seed=1)), _feeds(seed=1))


def test_returned_outputs_stay_the_callers(exe):
    first = exe(_feeds(seed=0))
    kept = {name: a.copy() for name, a in first.items()}
    second = exe(_feeds(seed=1))
    for name in first:
        np.testing.assert_array_equal(first[name], kept[name], err_msg=name)
        assert not np.shares_memory(first[name], second[name])
        assert first[name].flags.writeable and first[name].flags.c_contiguous
    assert not np.shares_memory(first["bias_out"], _feeds()["bias"])


def test_strided_read_only_fortran_and_subclass_inputs(exe):
    base = _feeds(seed=2)

    class Tagged(np.ndarray):
        pass

    unusual = [
        ("x", np.repeat(base["x"], 2, axis=1)[:, ::2]),  # strided view
        ("x", np.asfortranarray(base["x"])),
        ("bias", np.broadcast_to(base["bias"], (2, 7))[1]),  # read-only
        ("steps", base["steps"].view(Tagged)),
        ("x", base["x"].reshape(-1)[::-1][::-1].reshape(5, 7)),  # contiguous again
    ]
    for name, value in unusual:
        np.testing.assert_array_equal(value, base[name])
        feeds = {**base, name: value}
        _assert_like_interpreter(exe(feeds), base)


def test_lists_and_mappings_are_accepted_on_the_checked_path(exe):
    base = _feeds(seed=3)
    feeds = {
        "x": base["x"].tolist(),
        "bias": base["bias"],
        "steps": [int(v) for v in base["steps"]],
    }
    _assert_like_interpreter(exe(feeds), base)
    _assert_like_interpreter(exe.run(types.MappingProxyType(base)), base)


_FEEDS = _feeds()
BAD_FEEDS = {
    "missing input": ({"x": _FEEDS["x"], "bias": _FEEDS["bias"]}, "missing steps"),
    "unknown input": ({**_FEEDS, "z": _FEEDS["x"]}, "unknown 'z'"),
    "wrong dtype": (
        {**_FEEDS, "x": _FEEDS["x"].astype(np.float64)},
        "input 'x': dtype float64, declared float32",
    ),
    "other byte order": (
        {**_FEEDS, "bias": _FEEDS["bias"].astype(">f4")},
        "input 'bias': dtype >f4, declared float32",
    ),
    "wrong shape": (
        {**_FEEDS, "x": np.zeros((7, 5), np.float32)},
        "input 'x' dim 0: size 7, declared 5",
    ),
    "wrong rank": ({**_FEEDS, "bias": np.zeros((1, 7), np.float32)}, "input 'bias': rank 2"),
    "scalar for a vector": ({**_FEEDS, "steps": np.int32(3)}, "input 'steps': rank 0"),
    "not an array": ({**_FEEDS, "x": "data"}, "input 'x': expected a numpy array"),
    "float list for ints": (
        {**_FEEDS, "steps": [1.5, 2.0, 3.0]},
        "input 'steps': float64 values cannot be fed as int32",
    ),
    "ints out of range": ({**_FEEDS, "steps": [1, 2, 2**40]}, "input 'steps': values do not fit"),
    "not a mapping": ([_FEEDS["x"]], "feeds must be a mapping"),
}


@pytest.mark.parametrize("name", BAD_FEEDS, ids=str)
def test_bad_feeds_of_a_static_graph_name_the_input_and_the_problem(exe, name):
    feeds, match = BAD_FEEDS[name]
    with pytest.raises(mdsl.ExecutionError) as compiled:
        exe.run(feeds)
    assert isinstance(compiled.value, mdsl.MdslError)
    assert match in str(compiled.value)
    with pytest.raises(mdsl.ExecutionError) as interpreted:
        mdsl.interpret(_graph(), feeds)
    assert str(compiled.value) == str(interpreted.value)
    _assert_like_interpreter(exe(_feeds()), _feeds())  # the executable still works


@pytest.mark.parametrize(("backend", "threads"), BACKENDS_THREADS)
def test_a_symbolic_build_binds_matching_feeds_without_bind_feeds(backend, threads, monkeypatch):
    exe = mdsl.compile(_graph(ROWS), backend=backend, threads=threads)
    sizes = (5, 1, 9, 0, 5)
    checked = [exe.run(types.MappingProxyType(_feeds(i, rows))) for i, rows in enumerate(sizes)]

    def unexpected(*args):
        raise AssertionError("feeds that match the graph were bound again")

    monkeypatch.setattr(executable, "bind_feeds", unexpected)
    for i, rows in enumerate(sizes):
        fast = exe.run(_feeds(i, rows))
        for name in fast:
            np.testing.assert_array_equal(fast[name], checked[i][name], err_msg=name)
        want = mdsl.interpret(_graph(ROWS), _feeds(i, rows))
        for name, value in want.items():
            np.testing.assert_allclose(fast[name], value, rtol=2e-6, atol=1e-7, err_msg=name)
    monkeypatch.undo()
    with pytest.raises(mdsl.ExecutionError, match="N = 10 is outside its range"):
        exe.run(_feeds(0, rows=10))
    if backend == "c":
        assert list(exe.variants()) == [()]  # every size ran on the symbolic build


def test_debug_builds_and_captures_do_not_take_the_fast_path():
    exe = mdsl.compile(_graph(), backend="c", debug=True)
    out = exe(_feeds())
    assert list(out) == ["y", "counts", "bias_out"]  # the debug outputs are not returned
    _assert_like_interpreter(out, _feeds())
    captured = exe.run(_feeds(), capture=True)
    want = mdsl.interpret(_graph(), _feeds(), capture=True)
    shared = set(want) & set(captured)
    assert len(shared) > 30  # every computed tensor, not only the outputs
    for name in shared:
        np.testing.assert_allclose(captured[name], want[name], rtol=2e-6, atol=1e-7)


def test_concurrent_calls_on_the_fast_path():
    exe = mdsl.compile(_graph(), backend="c", threads=1)
    inputs = [_feeds(seed=i) for i in range(4)]
    expected = [exe(f) for f in inputs]

    def all_equal(i):
        outs = [exe(inputs[i]) for _ in range(50)]
        return all(np.array_equal(o[k], expected[i][k]) for o in outs for k in o)

    assert run_concurrently(all_equal, 4) == [True] * 4
