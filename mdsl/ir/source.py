"""Where the user wrote a node: the first stack frame outside the mdsl package."""

from __future__ import annotations

import contextlib
import functools
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# `with mdsl.scope(...)` runs our generator inside contextlib: that frame is not the user's
_PASS_THROUGH = {os.path.abspath(contextlib.__file__)}


def user_source() -> str | None:
    """`file:line` of the innermost caller outside mdsl, relative to the working directory."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (
            filename.startswith(_PACKAGE_DIR)
            or filename.startswith("<frozen")
            or filename in _PASS_THROUGH
        ):
            return f"{_short_path(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _short_path(filename: str) -> str:
    return _relative_to(filename, os.getcwd())


@functools.lru_cache(maxsize=1024)
def _relative_to(filename: str, cwd: str) -> str:
    # cached: every node asks, and relpath costs a quarter of building a large graph
    try:
        rel = os.path.relpath(filename, cwd)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
