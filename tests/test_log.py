"""The "mdsl" logger hierarchy: compile stages at INFO with times; bars on terminals only."""

import io
import logging

import numpy as np

import mdsl
from mdsl.log import format_seconds, get_logger, progress, progress_enabled


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
