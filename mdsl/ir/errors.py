"""The error hierarchy every user-facing failure derives from.

A message names where the problem is (node path, op type, the user's file:line) before what
it is, so the first line of a traceback is enough to find the offending code:

>>> str(ShapeError("K of a (64) != K of b (32)", node="Block3/MatMul", op_type="MatMul",
...                source="model.py:41"))
'Block3/MatMul (MatMul) at model.py:41: K of a (64) != K of b (32)'
"""

from __future__ import annotations

import difflib


class MdslError(Exception):
    """Base of every error mdsl raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        node: str | None = None,
        op_type: str | None = None,
        source: str | None = None,
    ):
        self.message = message
        self.node = None if node is None else str(node)
        self.op_type = op_type
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.node or ""
        if self.op_type:
            where = f"{where} ({self.op_type})" if where else self.op_type
        if self.source:
            where = f"{where} at {self.source}" if where else f"at {self.source}"
        return f"{where}: {self.message}" if where else self.message

    def with_context(self, *, node=None, op_type=None, source=None) -> MdslError:
        """The same error with missing location fields filled in (existing ones win)."""
        return type(self)(
            self.message,
            node=self.node or node,
            op_type=self.op_type or op_type,
            source=self.source or source,
        )


class GraphError(MdslError):
    """The graph's structure is wrong: names, edges, cycles, files, misuse of the builder."""


class ShapeError(MdslError, ValueError):
    """Shapes do not fit an op's rules (raised at build time by shape inference).

    Also a `ValueError`, so code that handles bad values generically catches it too.
    """


class DTypeError(MdslError, TypeError):
    """A dtype is outside what an op accepts or produces (also a `TypeError`)."""


class CompileError(MdslError):
    """Lowering or the native toolchain failed."""


class ExecutionError(MdslError):
    """Running a graph failed: bad feeds, or a node's implementation raised."""


def did_you_mean(keyword: str, known) -> str:
    """`" (did you mean `strides=`?)"` when a known keyword is close to `keyword`, else "".

    >>> did_you_mean("stride", ["strides", "pads"])
    ' (did you mean `strides=`?)'
    """
    close = difflib.get_close_matches(keyword, list(known), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}=`?)" if close else ""


# tracebacks then say `mdsl.ShapeError`, the name users import and catch
for _error in (MdslError, GraphError, ShapeError, DTypeError, CompileError, ExecutionError):
    _error.__module__ = "mdsl"
