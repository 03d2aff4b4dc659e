"""`g.pass_log`: the list of pass runs that made a graph, readable when printed.

Each entry is a `mdsl.passes.PassLogEntry` (name, changed, node counts, summary, seconds);
the list prints one line per run, `repr` is one line, and notebooks show a table.

>>> import mdsl
>>> with mdsl.Graph("m") as g:
...     x = g.input("x", (2, 2))
...     g.output(x + 0.0, "y")
>>> log = mdsl.optimize(g).pass_log
>>> repr(log).startswith("PassLog(") and "changed: simplify" in repr(log)
True
>>> "* simplify" in str(log)
True
"""

from __future__ import annotations

from mdsl.ir.html import html_table
from mdsl.log import format_seconds


class PassLog(list):
    """A list of pass-log entries; `str` is a table of lines, `repr` one line."""

    def changed(self) -> list:
        """The entries of the runs that changed the graph."""
        return [e for e in self if getattr(e, "changed", False)]

    def seconds(self) -> float:
        """The time all the runs took."""
        return sum(getattr(e, "seconds", 0.0) for e in self)

    def __repr__(self) -> str:
        names = list(dict.fromkeys(getattr(e, "name", str(e)) for e in self.changed()))
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        changed = f"changed: {shown}" if names else "nothing changed"
        return f"PassLog({len(self)} runs, {changed}; {format_seconds(self.seconds())})"

    def __str__(self) -> str:
        if not self:
            return "(no passes ran)"
        lines = [str(e) for e in self]
        lines.append(
            f"{len(self)} runs, {len(self.changed())} changed the graph, took {format_seconds(self.seconds())}"
        )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [
            [
                getattr(e, "name", str(e)),
                "yes" if getattr(e, "changed", False) else "",
                f"{getattr(e, 'nodes_before', '')} → {getattr(e, 'nodes_after', '')}",
                getattr(e, "summary", ""),
                format_seconds(getattr(e, "seconds", 0.0)),
            ]
            for e in self
        ]
        classes = ["changed" if getattr(e, "changed", False) else "" for e in self]
        return html_table(
            ["pass", "changed", "nodes", "summary", "time"], rows, row_classes=classes
        )
