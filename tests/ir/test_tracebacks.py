"""mdsl errors: builtin bases, and tracebacks trimmed to the user's frames."""

import traceback

import pytest

import mdsl
from mdsl import ops


def _matmul_mismatch():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 5))
        try:
            ops.matmul(x, mdsl.param("w", (3, 4)))
        finally:
            g.output(x, "y")


def _frame_files(error) -> list[str]:
    return [f.filename for f in traceback.extract_tb(error.__traceback__)]


def test_shape_and_dtype_errors_are_value_and_type_errors():
    assert issubclass(mdsl.ShapeError, ValueError)
    assert issubclass(mdsl.DTypeError, TypeError)
    with pytest.raises(ValueError, match="K of a"):
        _matmul_mismatch()
    with pytest.raises(TypeError, match="float"), mdsl.Graph() as g:
        x = g.input("x", (2,), "int32")
        g.output(ops.exp(x), "y")


def test_errors_print_under_the_name_users_import():
    assert mdsl.ShapeError.__module__ == "mdsl"
    assert traceback.format_exception_only(mdsl.ShapeError("bad"))[0].startswith("mdsl.ShapeError")


def test_traceback_keeps_user_frames_and_one_boundary(monkeypatch):
    monkeypatch.delenv("MDSL_DEBUG", raising=False)
    with pytest.raises(mdsl.ShapeError) as info:
        _matmul_mismatch()
    files = _frame_files(info.value)
    internal = [f for f in files if "/mdsl/" in f.replace("\\", "/") and "/tests/" not in f]
    assert internal == [mdsl.ir.tracebacks.__file__], files
    assert __file__ in files


def test_mdsl_debug_keeps_every_frame(monkeypatch):
    monkeypatch.setenv("MDSL_DEBUG", "1")
    with pytest.raises(mdsl.ShapeError) as info:
        _matmul_mismatch()
    internal = [f for f in _frame_files(info.value) if f.startswith(mdsl.__path__[0])]
    assert len(internal) >= 3
