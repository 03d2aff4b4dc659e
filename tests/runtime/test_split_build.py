"""A large plan builds as several C units (`mdsl.targets.c.render.render_units`): the
schedule unit, compiled without optimization, and kernel units compiled in parallel,
linked into one library. Here the split is forced on small graphs (SPLIT_CALLS 0, a
few lines per kernel unit) and the results are compared with the interpreter and with
the one-unit build of the same graph, at 1 and 2 threads, for symbolic sizes, repeated
layers (one kernel function called from several places), control flow and saved
executables.

The compile cache is off in these tests: its key does not see the constants patched
here, so it could serve a one-unit build of the same graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import onednn
from mdsl.targets.c import render
from tests.ops import op_table
from tests.ops.cases_control_flow import CASES

pytestmark = pytest.mark.usefixtures("sandbox")


@pytest.fixture(autouse=True)
def no_compile_cache(monkeypatch):
    monkeypatch.setenv("MDSL_COMPILE_CACHE", "0")


@pytest.fixture
def split(monkeypatch):
    monkeypatch.setattr(render, "SPLIT_CALLS", 0)
    monkeypatch.setattr(render, "KERNEL_UNIT_LINES", 30)


def _layers(count: int = 2, width: int = 24) -> mdsl.Graph:
    """`count` equal layers (matmul, softmax, layer norm, tanh-GELU) over a symbolic batch."""
    rng = np.random.default_rng(0)
    with mdsl.Graph("split layers") as g:
        h = g.input("x", ("B", 5, width))
        for i in range(count):
            w = g.const(f"w{i}", rng.standard_normal((width, width)).astype(np.float32) / 5)
            a = ops.matmul(h, w)
            e = ops.exp(a - ops.reduce_max(a, axes=(-1,), keepdims=True))
            s = e / ops.reduce_sum(e, axes=(-1,), keepdims=True)
            c = s + h - ops.reduce_mean(s + h, axes=(-1,), keepdims=True)
            n = c / ops.sqrt(ops.reduce_mean(c * c, axes=(-1,), keepdims=True) + 1e-5)
            h = 0.5 * n * (1.0 + ops.tanh(0.79788456 * (n + 0.044715 * n * n * n)))
        g.output(h, "y")
        g.output(ops.reduce_sum(h, axes=(1,)), "pooled")
    return g


def _feeds(batch: int, width: int = 24) -> dict[str, np.ndarray]:
    x = np.random.default_rng(batch).standard_normal((batch, 5, width)).astype(np.float32)
    return {"x": x}


def _assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name, w in want.items():
        assert got[name].shape == w.shape and got[name].dtype == w.dtype, name
        np.testing.assert_allclose(got[name], w, rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_split_build_equals_the_interpreter_and_the_one_unit_build(monkeypatch, threads):
    g = _layers()
    whole = mdsl.compile(g, backend="c", threads=threads)
    assert len(whole.sources) == 1
    with monkeypatch.context() as m:
        m.setattr(render, "SPLIT_CALLS", 0)
        m.setattr(render, "KERNEL_UNIT_LINES", 30)
        exe = mdsl.compile(g, backend="c", threads=threads)
    names = list(exe.sources)
    assert names[0] == "split_layers.c" and len(names) >= 3  # the schedule, 2+ kernel units
    assert all(n == f"split_layers_kernels{i}.c" for i, n in enumerate(names[1:], 1))
    for batch in (1, 3, 7):  # each a new shape signature of the one symbolic build
        feeds = _feeds(batch)
        got = exe(feeds)
        _assert_close(got, mdsl.interpret(g, feeds))
        for name, value in whole(feeds).items():  # the same kernels: the same bits
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_units_hold_the_schedule_apart_from_the_kernels(split):
    exe = mdsl.compile(_layers(count=3), backend="c")
    schedule, *kernel_units = exe.sources.values()
    assert "mdsl_run_dims(" in schedule and "mdsl_team_begin" in schedule
    # every loop is in a kernel unit; the schedule's one region wakes the team
    assert schedule.count("#pragma omp parallel") == 1
    assert "static double mdsl_team_wake(int size) {\n" in schedule
    defined = []
    for unit in kernel_units:
        assert "mdsl_run" not in unit and "mdsl_team_state" not in unit  # one team, one unit
        defined += [line.split("(")[0].split()[-1] for line in unit.splitlines()
                    if line.startswith("MDSL_KERNEL int ")]  # fmt: skip
    declared = [line.split("(")[0].split()[-1] for line in schedule.splitlines()
                if line.startswith("MDSL_KERNEL int ")]  # fmt: skip
    assert sorted(defined) == sorted(declared) and len(set(defined)) == len(defined)
    calls = [k for k in exe.plan.all_kernels()]
    assert len(defined) < len(calls)  # the second layer's kernels run as the first's


def test_a_split_profiling_build_times_every_kernel(split):
    g = _layers(count=1)
    exe = mdsl.compile(g, backend="c")
    profile = exe.profile(_feeds(2), runs=2)
    assert len(profile.kernels) == len(exe.plan.all_kernels())
    assert sum(k.median for k in profile.kernels) > 0  # the clocks around the calls ran


RUNNABLE = [c for c in CASES if c.raises is None]


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name() for c in RUNNABLE])
def test_control_flow_in_a_split_schedule_matches_the_interpreter(case, split):
    g = op_table.build_graph(case)
    exe = mdsl.compile(g, backend="c")
    assert len(exe.sources) >= 2
    want = mdsl.interpret(g, case.inputs)
    got = exe(case.inputs)
    assert got.keys() == want.keys()
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=case.rtol, atol=case.atol, err_msg=name)


def test_a_saved_split_build_loads_checked_and_runs(split, tmp_path):
    g = _layers(count=1)
    exe = mdsl.compile(g, backend="c")
    feeds = _feeds(2)
    want = exe(feeds)
    exe.save(tmp_path / "saved")
    loaded = mdsl.load_executable(tmp_path / "saved")
    assert loaded.sources == exe.sources and len(loaded.sources) >= 3
    for name, value in loaded(feeds).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)


def test_a_saved_split_build_is_refused_where_this_mdsl_would_not_split(
    split, tmp_path, monkeypatch
):
    exe = mdsl.compile(_layers(count=1), backend="c")
    exe.save(tmp_path / "saved")
    monkeypatch.setattr(render, "SPLIT_CALLS", 10**6)
    with pytest.raises(mdsl.CompileError, match="differs from what this mdsl generates"):
        mdsl.load_executable(tmp_path / "saved")


@pytest.mark.skipif(onednn.library_path() is None, reason="oneDNN is not installed")
def test_onednn_convolutions_in_several_kernel_units_match_the_interpreter(split):
    """Each kernel unit has its own oneDNN engine; primitives and weights stay per kernel."""
    rng = np.random.default_rng(5)
    with mdsl.Graph("split convs") as g:
        h = g.input("x", (1, 8, 13, 13))
        for i in range(3):
            w = g.const(f"w{i}", rng.standard_normal((8, 8, 3, 3)).astype(np.float32) / 8)
            h = ops.relu(ops.conv2d(h, w, pads=1)) + h
        g.output(h, "y")
    exe = mdsl.compile(g, backend="c", threads=2)
    assert len(exe.sources) >= 3
    assert sum("mdsl_dnnl" in unit for unit in list(exe.sources.values())[1:]) >= 2
    feeds = {"x": rng.standard_normal((1, 8, 13, 13)).astype(np.float32)}
    for _ in range(2):  # the second call reuses each unit's primitives
        _assert_close(exe(feeds), mdsl.interpret(g, feeds))


SCALE_C = """
static float twice(float v) { return 2.0f * v; }
int scale_f32(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs, int n_outputs,
              const double *attrs, int n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    for (int64_t i = 0; i < inputs[0].size; i++) y[i] = twice(x[i]);
    return 0;
}
"""


def test_a_custom_c_op_in_a_split_build_matches_numpy(split):
    @mdsl.op_proto("SplitScale", inputs={"x": "float32"}, outputs={"y": "float32"})
    def scale(x):
        return x

    mdsl.register_op_impl("SplitScale", backend="c", source=SCALE_C, symbol="scale_f32")
    with mdsl.Graph("split custom") as g:
        x = g.input("x", ("N", 6))
        g.output(ops.tanh(scale(ops.exp(x) * 0.5)) + 1.0, "y")
    exe = mdsl.compile(g, backend="c")
    assert len(exe.sources) >= 2
    x = np.linspace(-2, 2, 18, dtype=np.float32).reshape(3, 6)
    np.testing.assert_allclose(exe(x=x)["y"], np.tanh(np.exp(x)) + 1.0, rtol=1e-6, atol=1e-6)
