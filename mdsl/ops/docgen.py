"""Docstrings with a runnable example for ops declared in one line.

One-line declarations (`unary_pointwise("Floor", np.floor, doc=...)`) still owe users a
runnable example; this renders the usual one (build a graph, interpret it) from the call
and its feeds, so every such builder shows the same, tested shape of example.
"""

from __future__ import annotations

import numpy as np


def pointwise_doc(summary: str, call: str, result: str, dtype: str = "float32", **feeds) -> str:
    """`summary` plus a doctest running `mdsl.ops.<call>` on `feeds` (name -> list).

    >>> doc = pointwise_doc("Floor.", "floor(x)", "array([1.], dtype=float32)", x=[1.5])
    >>> doc.splitlines()[6]
    '...     g.output(mdsl.ops.floor(x), "y")'
    """
    arrays = ", ".join(f'"{n}": np.array({_literal(v)}, "{dtype}")' for n, v in feeds.items())
    lines = [
        summary,
        "",
        ">>> import numpy as np, mdsl",
        f">>> feeds = {{{arrays}}}",
        ">>> with mdsl.Graph() as g:",
    ]
    for name, values in feeds.items():
        lines.append(f'...     {name} = g.input("{name}", {np.shape(values)}, "{dtype}")')
    lines += [
        f'...     g.output(mdsl.ops.{call}, "y")',
        '>>> mdsl.interpret(g, feeds)["y"]',
        result,
    ]
    return "\n".join(lines) + "\n"


def _literal(values: list) -> str:
    return "[" + ", ".join("np.nan" if v != v else repr(v) for v in values) + "]"
