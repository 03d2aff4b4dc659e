"""Tracebacks of mdsl errors show the user's frames, not mdsl's internals.

An `MdslError` already says where the problem is (node path, op type, the user's line), so
the frames inside mdsl between the user's call and the raise only hide it. Public entry
points are wrapped with `api_boundary`: when an `MdslError` leaves them, the frames of mdsl
itself are dropped from its traceback (the user's own frames, e.g. a custom op's InferShape,
stay). `MDSL_DEBUG=1` keeps every frame.

>>> import mdsl
>>> g = mdsl.Graph()
>>> with g:
...     x = g.input("x", (2, 3))
...     try:
...         mdsl.ops.matmul(x, x)
...     except mdsl.ShapeError as e:
...         frames = [f for f in _frames(e.__traceback__) if _is_internal(f)]
...     g.output(x, "y")
>>> len(frames)  # only the boundary's own re-raise is left
1
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from mdsl.ir.errors import MdslError

P = ParamSpec("P")
R = TypeVar("R")

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep


def debug_enabled() -> bool:
    """Whether `MDSL_DEBUG` asks for full tracebacks and extra checks."""
    return os.environ.get("MDSL_DEBUG", "") not in ("", "0")


def api_boundary(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` with mdsl-internal frames trimmed from the tracebacks of MdslErrors it raises
    (its signature and types unchanged, for IDEs and type checkers)."""

    @functools.wraps(fn)
    def boundary(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except MdslError as error:
            if debug_enabled():
                raise
            raise error.with_traceback(_without_mdsl_frames(error)) from error.__cause__

    boundary.__wrapped_boundary__ = True
    return boundary


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _is_internal(tb) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)


def _without_mdsl_frames(error: BaseException) -> types.TracebackType | None:
    """The error's traceback without mdsl's frames (MDSL_DEBUG=1 keeps them)."""
    tb = error.__traceback__  # starts at the boundary, which re-adds itself when raising
    kept = [t for t in _frames(tb.tb_next if tb is not None else None) if not _is_internal(t)]
    chain = None
    for t in reversed(kept):
        chain = types.TracebackType(chain, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return chain
