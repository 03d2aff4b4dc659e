"""The "mdsl" logger hierarchy: compile stages at INFO with times; bars on terminals only."""

import contextlib
import io
import logging

import numpy as np
import pytest

import mdsl
from mdsl.log import format_seconds, get_logger, progress, progress_enabled, waiting


def _graph(scale: float):
    with mdsl.Graph("logged") as g:
        x = g.input("x", (4, 7))
        g.output(mdsl.ops.softmax(x * scale), "y")
    return g


def test_compile_logs_each_stage_with_its_time(caplog):
    caplog.set_level(logging.INFO, logger="mdsl")
    exe = mdsl.compile(_graph(3.0), backend="c")
    np.testing.assert_allclose(exe(x=np.zeros((4, 7), np.float32))["y"], 1 / 7, rtol=1e-6)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("mdsl.")]
    for stage in ("optimize 'logged'", "plan 'logged'", "render C 'logged'", "build 'logged'"):
        assert any(m.startswith(stage) and m.endswith(("s", "ms", "us")) for m in messages), (
            stage,
            messages,
        )
    assert any(
        m.startswith("C library logged.so: cache hit") or "cache miss" in m for m in messages
    )


def test_nothing_is_logged_below_warning_by_default(caplog):
    caplog.set_level(logging.WARNING)
    mdsl.compile(_graph(2.0), backend="python")
    assert not [r for r in caplog.records if r.name.startswith("mdsl")]


def test_loggers_live_under_mdsl():
    assert get_logger("runtime.compile").name == "mdsl.runtime.compile"
    assert get_logger("mdsl.codegen").parent.name == "mdsl"


def test_progress_is_silent_off_a_terminal(monkeypatch):
    monkeypatch.delenv("MDSL_PROGRESS", raising=False)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not progress_enabled()
    assert list(progress(range(3), "work")) == [0, 1, 2]
    assert monkeypatch is not None and not __import__("sys").stderr.getvalue()


def test_progress_bar_when_forced(monkeypatch):
    monkeypatch.setenv("MDSL_PROGRESS", "1")
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert list(progress(range(3), "work", total=3)) == [0, 1, 2]
    assert "work" in err.getvalue()


def test_format_seconds():
    assert [format_seconds(s) for s in (5e-6, 0.0123, 4.2)] == ["5 us", "12.3 ms", "4.20 s"]


def test_waiting_shows_a_bar_only_when_forced(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setenv("MDSL_PROGRESS", "0")
    with waiting("quiet step", delay=0):
        pass
    monkeypatch.setenv("MDSL_PROGRESS", "1")
    with waiting("long step", delay=0):
        pass
    assert "quiet step" not in err.getvalue() and "long step" in err.getvalue()


class _Recorder:
    """Stands in for a progress helper: records each description, passes the work through."""

    def __init__(self):
        self.descriptions = []

    def progress(self, iterable, description, total=None, **_):
        self.descriptions.append(description)
        return iter(iterable)

    @contextlib.contextmanager
    def waiting(self, description, **_):
        self.descriptions.append(description)
        yield


def test_a_c_compile_shows_progress(monkeypatch, tmp_path):
    seen = _Recorder()
    monkeypatch.setattr("mdsl.codegen.toolchain.waiting", seen.waiting)
    monkeypatch.setenv("MDSL_CACHE_DIR", str(tmp_path))  # a miss: the compiler runs
    mdsl.compile(_graph(5.0), backend="c")
    assert any(d.startswith("C compile logged.so") for d in seen.descriptions), seen.descriptions


def test_onnx_import_and_conformance_show_progress(monkeypatch):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from mdsl.frontends.onnx_conformance import collect_cases, run_conformance

    seen = _Recorder()
    monkeypatch.setattr("mdsl.frontends.onnx_import.progress", seen.progress)
    monkeypatch.setattr("mdsl.frontends.onnx_conformance.progress", seen.progress)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Relu", ["x"], ["y"])
    model = helper.make_model(helper.make_graph([node], "tiny", [x], [y]))
    mdsl.frontends.onnx.load(onnx.load_from_string(model.SerializeToString()))
    assert "import tiny" in seen.descriptions
    run_conformance(cases=collect_cases(["test_relu"]))
    assert "ONNX conformance (python)" in seen.descriptions


def test_specialized_variants_build_with_progress(monkeypatch):
    seen = _Recorder()
    monkeypatch.setattr("mdsl.runtime.executable.progress", seen.progress)
    with mdsl.Graph("sized") as g:
        g.output(g.input("x", ("N", 3)) * 2.0, "y")
    exe = mdsl.compile(g, backend="python", specialize={"N": [1, 2]})
    assert seen.descriptions == ["build sized variants"] and len(exe.variants()) >= 2
