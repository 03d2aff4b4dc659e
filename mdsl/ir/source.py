"""Where the user wrote a node: the first stack frame outside the mdsl package."""

from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_source() -> str | None:
    """`file:line` of the innermost caller outside mdsl, relative to the working directory."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR) and not filename.startswith("<frozen"):
            return f"{_short_path(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _short_path(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
