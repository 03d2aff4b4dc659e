"""Text helpers of mdsl's reports (compare, bisect, diff, profile tables and the CLI): one
default width, clipping a line, shortening a node path to fit.

>>> clip("abcdef", 4), shorten_path("EncoderBlock_1/Attention/Q/MatMul", 28)
('abc…', 'EncoderBlock_1/…ion/Q/MatMul')
"""

from __future__ import annotations

WIDTH = 100  # columns of every text report unless told otherwise


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def shorten_path(name: str, width: int) -> str:
    """`EncoderBlock_1/…ion/Q/MatMul`: the first path part (when it takes at most 3/5 of
    the width), an ellipsis, and as much of the end as fits."""
    if len(name) <= width:
        return name
    first = name.partition("/")[0] + "/"
    head = first if "/" in name and 5 * len(first) <= 3 * width else name[: (width - 1) // 2]
    return head + "…" + name[len(name) - (width - 1 - len(head)) :]
