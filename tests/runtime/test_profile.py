"""The profiler (`exe.profile`): FLOPs and bytes per kernel from the Kernel IR checked
against hand counts, kernel times consistent with the wall time of each run, the Chrome
trace checked event by event, the table's layout, and the same interface on the numba
and python backends."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.c_target import render_c
from mdsl.runtime.profile import KernelProfile, Profile, expression_ops, node_flops

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
RNG = np.random.default_rng(0)


def mlp() -> mdsl.Graph:
    """A GEMM with a bias+relu epilogue, then a softmax*2 row kernel."""
    with mdsl.Graph("mlp") as g:
        x = g.input("x", ("N", 32))
        with mdsl.scope("Hidden"):
            h = ops.relu(x @ mdsl.param("w", (32, 16)) + mdsl.param("b", (16,)))
        with mdsl.scope("Head"):
            y = ops.softmax(h, axis=-1) * 2.0
        g.output(y, "y")
    return g


def cnn() -> mdsl.Graph:
    with mdsl.Graph("cnn") as g:
        x = g.input("x", (1, 3, 8, 8))
        with mdsl.scope("Features"):
            y = ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), mdsl.param("b", (4,)), pads=1)
            y = ops.max_pool(ops.relu(y), 2, strides=2)
        g.output(y, "y")
    return g


X = RNG.standard_normal((8, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def c_profile() -> tuple[mdsl.Executable, Profile]:
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    exe = mdsl.compile(mlp(), backend="c")
    return exe, exe.profile({"x": X}, runs=4)


# -- costs -----------------------------------------------------------------------------------
@needs_cc
def test_flops_and_bytes_come_from_the_kernel_ir(c_profile):
    exe, prof = c_profile
    assert [k.name for k in prof.kernels] == [k.name for k in exe.kernels]
    gemm, rows = prof.kernels
    assert (gemm.op_type, gemm.layer, gemm.kind) == ("Gemm+Relu", "Hidden", "GEMM + epilogue")
    assert (rows.op_type, rows.layer) == ("Softmax+Mul", "Head")
    # GEMM 8x16x32, epilogue max(acc + bias, 0): 2 ops per output element
    assert gemm.flops == 2 * 8 * 16 * 32 + 2 * 8 * 16
    f32 = 4
    assert gemm.bytes == f32 * (8 * 32 + 32 * 16 + 16) + f32 * 8 * 16  # x, w, b; out
    # per row of 16: max (1/elem), sum of exp(x - max) (3/elem), 1/sum, exp(x - max) * s * 2
    assert rows.flops == 8 * (16 * 1 + 16 * 3 + 1 + 16 * 4)
    assert rows.bytes == 2 * f32 * 8 * 16
    assert prof.flops == gemm.flops + rows.flops and prof.symbols == {"N": 8}


@needs_cc
def test_convolution_and_pooling_costs():
    exe = mdsl.compile(cnn(), backend="c")
    conv, pool = exe.profile({"x": RNG.standard_normal((1, 3, 8, 8), np.float32)}, runs=1).kernels
    assert (conv.op_type, pool.op_type) == ("Conv+Relu", "MaxPool")
    # 2 * N*Cout*OH*OW * Cin*KH*KW, epilogue max(acc + bias, 0)
    assert conv.flops == 2 * (4 * 8 * 8) * (3 * 3 * 3) + 2 * 4 * 8 * 8
    assert pool.flops == 4 * 4 * 4 * (2 * 2) and pool.bytes == 4 * (4 * 8 * 8 + 4 * 4 * 4)
    assert conv.layer == "Features"


def test_expression_and_node_counts():
    x, y = mdsl.expr.var("x"), mdsl.expr.var("y")
    shared = mdsl.expr.exp(x - y)
    assert expression_ops(shared * shared + mdsl.expr.cast(x, "float16")) == 4  # -, exp, *, +
    g = mlp()
    matmul = next(n for n in g if n.op_type == "MatMul")
    assert node_flops(matmul, [(8, 32), (32, 16)], [(8, 16)]) == 2 * 8 * 16 * 32
    relu = next(n for n in g if n.op_type == "Relu")
    assert node_flops(relu, [(8, 16)], [(8, 16)]) == 8 * 16  # max(x, 0): one op an element


# -- times ----------------------------------------------------------------------------------
def assert_consistent_with_wall_time(prof: Profile) -> None:
    assert prof.runs == len(prof.wall) == len(prof.run_starts)
    for r, wall in enumerate(prof.wall):
        end = 0.0
        for k in prof.kernels:
            start, took = k.starts[r], k.times[r]
            assert took >= 0 and start >= end - 1e-9  # in schedule order, not overlapping
            end = start + took
        assert end <= wall and sum(k.times[r] for k in prof.kernels) <= wall
    assert prof.kernel_seconds <= max(prof.wall)


@needs_cc
def test_kernel_times_add_up_within_each_run(c_profile):
    _, prof = c_profile
    assert all(len(k.times) == 4 and len(k.starts) == 4 for k in prof.kernels)
    assert all(max(k.times) > 0 for k in prof.kernels)
    assert_consistent_with_wall_time(prof)


@needs_cc
def test_a_big_kernel_takes_most_of_the_wall_time():
    with mdsl.Graph("big") as g:
        a = g.input("a", (384, 384))
        g.output(ops.tanh(a @ mdsl.param("w", (384, 384))), "y")
    exe = mdsl.compile(g, backend="c", threads=1)
    prof = exe.profile({"a": RNG.standard_normal((384, 384), np.float32)}, runs=5)
    assert_consistent_with_wall_time(prof)
    [k] = prof.kernels
    assert k.flops == 2 * 384**3 + 384 * 384  # + tanh
    ratios = sorted(k.times[r] / prof.wall[r] for r in range(prof.runs))
    assert ratios[len(ratios) // 2] > 0.5  # the call overhead is microseconds
    assert k.gflops == pytest.approx(k.flops / k.median / 1e9)


@needs_cc
def test_the_timers_exist_only_in_the_profiling_build(c_profile):
    exe, _ = c_profile
    normal = next(iter(exe.sources.values()))
    # the normal build times whole calls only (to choose its team size), no kernel
    assert "mdsl_run_profile" not in normal and "mdsl_start" not in normal
    assert render_c(exe.plan) == normal
    timed = render_c(exe.plan, profile=True)
    start, end = timed.index("/* Profiling build only"), timed.index("void mdsl_set_threads")
    assert timed[:start] + timed[end:] == normal
    assert (
        "clock_gettime(CLOCK_MONOTONIC" in timed and timed.count("mdsl_start = mdsl_clock();") == 2
    )
    assert "timings[2] = mdsl_start - mdsl_t0; timings[3] = mdsl_clock() - mdsl_start;" in timed
    variant = next(iter(exe.variants().values()))
    outputs, timings = variant.run_profiled({"x": X})
    np.testing.assert_array_equal(outputs["y"], exe.run({"x": X})["y"])
    assert timings.shape == (2, 2)


# -- the Chrome trace ----------------------------------------------------------------------------
def _strict_json(text: str):
    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=no_constants)


@needs_cc
def test_the_chrome_trace_has_a_complete_event_per_kernel_per_run(c_profile, tmp_path):
    _, prof = c_profile
    path = prof.to_chrome_trace(tmp_path / "trace.json")
    doc = _strict_json(path.read_text())
    assert set(doc) >= {"traceEvents", "displayTimeUnit"}
    assert doc["otherData"]["backend"] == "c" and doc["otherData"]["runs"] == 4
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "thread_name", "thread_sort_index"}
    tracks = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    top_layers = list(dict.fromkeys(k.layer.split("/")[0] for k in prof.kernels))
    assert list(tracks.values()) == ["runs", *(layer or "(top)" for layer in top_layers)]
    complete = [e for e in events if e["ph"] == "X"]
    layers = [e for e in complete if e["cat"] == "layer"]
    assert len(layers) == prof.runs * sum(1 for layer in top_layers if layer)
    assert len(complete) == prof.runs * (len(prof.kernels) + 1) + len(layers)
    assert len(complete) == len(events) - len(meta)
    for e in complete:
        assert set(e) == {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and e["pid"] == 1
    runs = [e for e in complete if e["cat"] == "run"]
    assert [e["name"] for e in runs] == [f"run {r}" for r in range(4)]
    assert {e["tid"] for e in runs} == {1}
    assert [e["ts"] for e in runs] == sorted(e["ts"] for e in runs) and runs[0]["ts"] == 0
    kernels = [e for e in complete if e["cat"] not in ("run", "layer")]
    assert [e["name"] for e in kernels] == [k.name for k in prof.kernels] * 4
    for e, k in zip(kernels, prof.kernels * 4):  # each kernel on its top-level layer's track
        assert tracks[e["tid"]] == (k.layer.split("/")[0] or "(top)")
    for r, run in enumerate(runs):  # each run's kernels nest inside it
        for e in kernels[r * 2 : r * 2 + 2]:
            assert run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 1e-3
            span = [s for s in layers if s["tid"] == e["tid"] and s["args"]["run"] == r]
            for s in span:  # and inside their layer's slice of that run
                assert s["ts"] <= e["ts"] + 1e-3 and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3
    first = kernels[0]["args"]
    assert first["nodes"] == ["Hidden/Gemm", "Hidden/Relu"] and first["layer"] == "Hidden"
    assert first["flops"] == prof.kernels[0].flops and first["bytes"] == prof.kernels[0].bytes
    assert first["GFLOP/s"] == pytest.approx(
        first["flops"] / (kernels[0]["dur"] * 1e-6) / 1e9, rel=1e-2
    )


def test_an_unwritable_trace_path_is_an_execution_error(tmp_path):
    prof = Profile("g", "c", [], (), ())
    with pytest.raises(mdsl.ExecutionError, match="cannot write the trace"):
        prof.to_chrome_trace(tmp_path / "missing" / "trace.json")


# -- the table ---------------------------------------------------------------------------------
@needs_cc
def test_the_table_groups_by_kernel_op_type_and_layer(c_profile):
    _, prof = c_profile
    text = prof.table()
    lines = text.splitlines()
    assert lines[0] == "profile 'mlp' (c, N=8): 4 runs, 2 kernels"
    assert max(map(len, lines)) <= 100
    headers = [
        i for i, line in enumerate(lines) if line.split()[-4:] == ["us", "%", "GFLOP/s", "GB/s"]
    ]
    assert [lines[i].split()[0] for i in headers] == ["kernel", "op", "layer"]
    kernel_rows = lines[headers[0] + 1 : headers[0] + 3]
    by_time = sorted(prof.kernels, key=lambda k: -k.median)
    assert [row.split()[0] for row in kernel_rows] == [k.name for k in by_time]
    assert {row.split()[0] for row in lines[headers[2] + 1 :]} == {"Hidden", "Head"}
    for key in ("op", "layer", "kernel"):
        groups = prof.by(key)
        assert sum(g.seconds for g in groups) == pytest.approx(prof.kernel_seconds)
        assert [g.seconds for g in groups] == sorted((g.seconds for g in groups), reverse=True)
    short = prof.table(top=1, width=80).splitlines()
    assert max(map(len, short)) <= 80 and "  (+1 more kernels: " in "\n".join(short)
    with pytest.raises(mdsl.ExecutionError, match="kernel, op or layer"):
        prof.by("device")


def test_layer_groups_cut_paths_to_the_depth():
    def kernel(name, layer, seconds):
        return mdsl.runtime.profile.KernelProfile(
            name, "pointwise", "Add", layer, (name,), 10, 8, (0.0,), (seconds,)
        )

    prof = Profile(
        "g",
        "c",
        [kernel("a", "Enc/Attn/Q", 1e-6), kernel("b", "Enc/Attn", 3e-6), kernel("c", "", 2e-6)],
        (1e-5,),
        (0.0,),
    )
    assert [(g.key, g.kernels) for g in prof.by("layer", depth=2)] == [("Enc/Attn", 2), ("", 1)]
    assert [(g.key, g.kernels) for g in prof.by("layer", depth=3)][-1] == ("Enc/Attn/Q", 1)
    assert prof.by("op")[0].gflops == pytest.approx(30 / 6e-6 / 1e9)
    assert "(top)" in prof.table()


# -- other backends and errors ---------------------------------------------------------------------
def test_the_python_backend_times_each_node():
    g = mlp()
    exe = mdsl.compile(g, backend="python", opt_level=1)
    prof = exe.profile({"x": X}, runs=2, warmup=0)
    computed = [n for n in exe.graph if n.op_type not in ("Input", "Const", "Output")]
    assert [k.name for k in prof.kernels] == [n.name for n in computed]
    assert [k.op_type for k in prof.kernels] == [n.op_type for n in computed]
    matmul = next(k for k in prof.kernels if k.op_type == "MatMul")
    assert matmul.flops == 2 * 8 * 16 * 32 and matmul.bytes == 4 * (8 * 32 + 32 * 16 + 8 * 16)
    assert matmul.layer == "Hidden" and prof.unit == "nodes"
    assert_consistent_with_wall_time(prof)
    assert prof.table().splitlines()[0] == "profile 'mlp' (python, N=8): 2 runs, 5 nodes"


def test_the_numba_backend_times_each_kernel_call():
    pytest.importorskip("numba")
    exe = mdsl.compile(mlp(), backend="numba")
    prof = exe.profile({"x": X}, runs=3)
    assert [k.name for k in prof.kernels] == [k.name for k in exe.kernels]
    assert [k.flops for k in prof.kernels] == [2 * 8 * 16 * 32 + 2 * 8 * 16, 8 * 129]
    assert all(min(k.times) > 0 for k in prof.kernels)
    assert_consistent_with_wall_time(prof)


@needs_cc
def test_bad_arguments_are_execution_errors(c_profile):
    exe, _ = c_profile
    for runs in (0, -1, 1.5, True):
        with pytest.raises(mdsl.ExecutionError, match="runs must be an int >= 1"):
            exe.profile({"x": X}, runs=runs)
    with pytest.raises(mdsl.ExecutionError, match="warmup must be an int >= 0"):
        exe.profile({"x": X}, warmup=-1)
    with pytest.raises(mdsl.ExecutionError, match="missing x"):
        exe.profile({"y": X})


@needs_cc
def test_each_shape_signature_profiles_its_own_variant(c_profile):
    exe, _ = c_profile
    prof = exe.profile({"x": RNG.standard_normal((3, 32), np.float32)}, runs=1)
    assert prof.symbols == {"N": 3}
    assert prof.kernels[0].flops == 2 * 3 * 16 * 32 + 2 * 3 * 16
    assert math.isfinite(prof.kernels[0].gbps) or prof.kernels[0].median == 0


def _synthetic(wall, compile_seconds=0.0) -> Profile:
    k = KernelProfile("k0", "pointwise", "Add", "L", ("L/Add",), 10, 40, (0.0,) * len(wall), wall)
    starts = tuple(float(i) for i in range(len(wall)))
    return Profile("g", "c", [k], wall, starts, {}, compile_seconds=compile_seconds)


def test_profiles_report_median_and_iqr_and_warn_when_busy():
    quiet = _synthetic((1e-3, 1.01e-3, 0.99e-3, 1e-3, 1.02e-3), compile_seconds=0.25)
    assert quiet.wall_median == pytest.approx(1e-3)
    assert quiet.wall_iqr == pytest.approx(np.subtract(*np.percentile(quiet.wall, [75, 25])))
    assert not quiet.busy and "warning" not in quiet.summary()
    assert "run 1000.0 us median (IQR" in quiet.summary()
    assert "compile 250.0 ms before the runs" in quiet.summary()
    busy = _synthetic((1e-3, 3e-3, 1e-3, 5e-3, 1e-3, 4e-3))
    assert busy.kernels[0].median == pytest.approx(2e-3) and busy.busy
    assert "the machine was busy" in busy.summary()


def test_compile_time_is_measured_apart_from_the_runs():
    with mdsl.Graph("apart") as g:
        x = g.input("x", (16,))
        g.output(ops.exp(x * 3.0 - 1.0), "y")
    prof = mdsl.compile(g, backend="numba").profile({"x": np.ones(16, np.float32)}, runs=3)
    assert prof.compile_seconds > 0 and max(prof.wall) < prof.compile_seconds
