"""The Executable of the C backend: feeds checked like the interpreter's, variants per shape
signature, fresh output arrays, unusual but valid input arrays, and the inspection API."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from tests.runtime.concurrency import run_concurrently


def _graph() -> mdsl.Graph:
    """y = softmax(x @ w + b) * scale; x (N, 8) float32, scale (N, 1)."""
    rng = np.random.default_rng(0)
    with mdsl.Graph("feeds") as g:
        x = g.input("x", (mdsl.Dim("N", max=6), 8))
        scale = g.input("scale", ("N", 1))
        w = g.const("w", rng.standard_normal((8, 5)).astype(np.float32))
        b = g.const("b", rng.standard_normal(5).astype(np.float32))
        g.output(ops.softmax(x @ w + b, axis=-1) * scale, "y")
    return g


@pytest.fixture(scope="module")
def exe():
    return mdsl.compile(_graph(), backend="c")


def _feeds(n: int = 3, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((n, 8)).astype(np.float32),
        "scale": rng.uniform(1, 2, (n, 1)).astype(np.float32),
    }


def _expected(feeds) -> np.ndarray:
    return mdsl.interpret(_graph(), feeds)["y"]


# -- bad feeds ------------------------------------------------------------------------------------
BAD_FEEDS = {
    "missing input": ({"x": _feeds()["x"]}, "missing scale"),
    "unknown input": ({**_feeds(), "z": np.zeros(1)}, "unknown 'z'"),
    "wrong dtype": ({**_feeds(), "x": _feeds()["x"].astype(np.float64)}, "dtype float64"),
    "wrong rank": ({**_feeds(), "x": np.zeros((3, 8, 1), np.float32)}, "rank 3"),
    "wrong static dim": ({**_feeds(), "x": np.zeros((3, 7), np.float32)}, "size 7, declared 8"),
    "symbol disagrees": ({**_feeds(), "scale": np.ones((4, 1), np.float32)}, "N = 4"),
    "symbol above max": (_feeds(n=7), "outside its range"),
    "not an array": ({**_feeds(), "x": "data"}, "expected a numpy array"),
    "ragged list": ({**_feeds(), "x": [[1.0], [1.0, 2.0]]}, "not a rectangular array"),
    "lossy list": ({**_feeds(), "scale": [[1.5], [2.5], [3.5]], "x": [[1] * 8] * 3}, None),
    "not a mapping": ([1, 2], "feeds must be a mapping"),
}


@pytest.mark.parametrize("name", [n for n, (_, m) in BAD_FEEDS.items() if m], ids=str)
def test_bad_feeds_are_execution_errors_like_the_interpreters(exe, name):
    feeds, match = BAD_FEEDS[name]
    with pytest.raises(mdsl.ExecutionError, match=match) as compiled:
        exe.run(feeds)
    with pytest.raises(mdsl.ExecutionError) as interpreted:
        mdsl.interpret(_graph(), feeds)
    assert str(compiled.value) == str(interpreted.value)
    np.testing.assert_allclose(exe(_feeds())["y"], _expected(_feeds()), rtol=1e-6)  # still fine


def test_python_lists_are_converted_when_lossless(exe):
    feeds, _ = BAD_FEEDS["lossy list"]  # int and float lists into float32: lossless
    np.testing.assert_allclose(exe(feeds)["y"], _expected(feeds), rtol=1e-6)


def test_a_feed_error_names_the_input_and_dim(exe):
    with pytest.raises(mdsl.ExecutionError) as info:
        exe(x=np.zeros((3, 8), np.float32), scale=np.ones((3, 2), np.float32))
    assert "input 'scale' dim 1: size 2, declared 1" in str(info.value)


def test_static_graph_feeds_are_checked_on_the_fast_path_too():
    with mdsl.Graph("static") as g:
        g.output(g.input("x", (2, 3)) * 2.0, "y")
    exe = mdsl.compile(g, backend="c")
    for bad in (np.zeros((3, 2), np.float32), np.zeros((2, 3), np.int32), np.zeros(6, np.float32)):
        with pytest.raises(mdsl.ExecutionError):
            exe(x=bad)
    with pytest.raises(mdsl.ExecutionError, match="unknown 'y'"):
        exe(x=np.zeros((2, 3), np.float32), y=np.zeros((2, 3), np.float32))


# -- valid but unusual arrays -----------------------------------------------------------------------
def test_non_contiguous_read_only_and_fortran_inputs(exe):
    base = _feeds(n=4)
    x_strided = np.repeat(base["x"], 2, axis=0)[::2]  # a strided view of equal values
    x_fortran = np.asfortranarray(base["x"])
    scale_ro = np.broadcast_to(np.float32(1.5), (4, 1))  # read-only, stride 0
    want = _expected({"x": base["x"], "scale": np.full((4, 1), 1.5, np.float32)})
    for x in (x_strided, x_fortran):
        assert not x.flags.c_contiguous
        np.testing.assert_allclose(exe(x=x, scale=scale_ro)["y"], want, rtol=1e-6)
    assert x_strided.base is not None and not scale_ro.flags.writeable


def test_outputs_are_fresh_arrays_owned_by_the_caller(exe):
    feeds = _feeds()
    first = exe(feeds)["y"]
    kept = first.copy()
    first[...] = -1.0  # the caller may write into its result
    second = exe(feeds)["y"]
    np.testing.assert_array_equal(second, kept)
    assert not np.shares_memory(first, second)
    assert second.flags.c_contiguous and second.flags.writeable and second.flags.owndata


def test_outputs_that_are_inputs_or_repeated_tensors_are_copies():
    with mdsl.Graph("aliases") as g:
        x = g.input("x", (3,))
        y = ops.exp(x)
        g.output(x, "same_as_input")
        g.output(y, "first")
        g.output(y, "second")
    exe = mdsl.compile(g, backend="c")
    x = np.arange(3, dtype=np.float32)
    out = exe(x=x)
    np.testing.assert_array_equal(out["same_as_input"], x)
    np.testing.assert_allclose(out["first"], np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(out["first"], out["second"])
    assert not np.shares_memory(out["same_as_input"], x)
    assert not np.shares_memory(out["first"], out["second"])


def test_an_empty_batch_runs_and_returns_empty_outputs(exe):
    out = exe(_feeds(n=0))["y"]
    assert out.shape == (0, 5) and out.dtype == np.float32


# -- variants -----------------------------------------------------------------------------------
def test_one_variant_per_shape_signature_and_each_is_reused():
    g = _graph()
    exe = mdsl.compile(g, backend="c", specialize=True)
    with pytest.raises(mdsl.CompileError, match="has not run yet"):
        _ = exe.sources
    for n in (1, 4, 1, 4, 2):
        np.testing.assert_allclose(exe(_feeds(n))["y"], _expected(_feeds(n)), rtol=1e-6)
    variants = exe.variants()
    assert sorted(variants) == [(("N", 1),), (("N", 2),), (("N", 4),)]
    assert variants[(("N", 4),)].plan.graph.inputs["x"].shape == (4, 8)
    assert "for (int64_t" in next(iter(exe.sources.values()))
    assert exe.memory is exe.plan.memory  # inspection shows the latest variant (N = 2)
    assert exe.plan.graph.inputs["x"].shape == (2, 8)


def test_concurrent_first_calls_build_one_usable_variant(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_CACHE_DIR", str(tmp_path))  # a cold cache: real builds race
    exe = mdsl.compile(_graph(), backend="c")
    results = run_concurrently(lambda i: exe(_feeds(n=5, seed=i))["y"], 4)
    for i in range(4):
        np.testing.assert_allclose(results[i], _expected(_feeds(n=5, seed=i)), rtol=1e-6)
    assert list(exe.variants()) == [()]  # the symbolic build, built once


# -- inspection ---------------------------------------------------------------------------------
def test_kernels_list_every_computed_node_once(exe):
    exe(_feeds())
    covered = [name for k in exe.kernels for name in k.nodes]
    computed = [n.name for n in exe.plan.graph if n.op_type not in ("Input", "Const", "Output")]
    assert sorted(covered) == sorted(computed)
    assert {k.kind for k in exe.kernels} <= {"GEMM + epilogue", "row reduction", "pointwise"}


def test_memory_figures_are_consistent(exe):
    exe(_feeds())
    m = exe.memory
    assert 0 < m.lower_bound_bytes <= m.arena_bytes <= m.naive_bytes
    assert m.arena_bytes % m.alignment == 0
    assert "arena" in m.summary()


def test_repr_names_graph_backend_and_variants(exe):
    exe(_feeds())
    assert repr(exe).startswith("Executable('feeds', backend='c', ")


def test_compiling_for_c_imports_no_other_target():
    """Each import costs every user's first compile (AscendC's emulator: ~0.4 s)."""
    import subprocess
    import sys

    code = (
        "import sys, mdsl\n"
        "with mdsl.Graph() as g:\n"
        "    g.output(g.input('x', (4,)) * 2.0, 'y')\n"
        "mdsl.compile(g, backend='c')\n"
        "print(sorted(m for m in sys.modules if m.startswith('mdsl.targets.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    loaded = {m.split(".")[2] for m in eval(out.stdout.strip().splitlines()[-1])}
    assert "c" in loaded and not loaded & {"ascendc", "numba"}, loaded
