"""Finding the user's line in a test file, to check that errors and nodes point at it.

A test marks the line it expects with a trailing comment `# <- marker` and asks for its
number here, so the expectation stays right when lines above it move.
"""

from __future__ import annotations

import os


def line_of(path: str, marker: str) -> int:
    """The 1-based number of the one line of `path` ending in `# <- marker`."""
    tag = f"# <- {marker}"
    with open(path, encoding="utf-8") as f:
        hits = [i for i, line in enumerate(f, 1) if line.rstrip().endswith(tag)]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {path}"
    return hits[0]


def assert_points_at(source: str | None, path: str, marker: str) -> None:
    """`source` ("file:line") names the marked line of `path` (as a path that is that file)."""
    assert source is not None, "no source recorded"
    file, _, line = source.rpartition(":")
    assert int(line) == line_of(path, marker), f"{source} is not the line marked {marker!r}"
    assert os.path.samefile(file, path), f"{source} is not in {path}"


def assert_error_at(err, path: str, marker: str, *, node: str | None, op_type: str | None):
    """An MdslError names `node` and `op_type`, points at the marked line, and renders as
    one line `<node> (<op_type>) at <file:line>: <message>`."""
    assert_points_at(err.source, path, marker)
    assert err.node == node
    assert err.op_type == op_type
    text = str(err)
    assert "\n" not in text, f"error is not one line: {text!r}"
    where = " ".join(p for p in (node, f"({op_type})" if op_type else None) if p)
    prefix = f"{where} at {err.source}: " if where else f"at {err.source}: "
    assert text.startswith(prefix), f"{text!r} does not start with {prefix!r}"
