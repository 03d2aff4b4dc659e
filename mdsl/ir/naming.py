"""Names, and user strings on their way into generated files: the one place unique names
are made (nodes, layers) and user text is made safe for a file name, a C or Python
comment, or a Markdown table cell. Every target and every report uses these.

>>> c_comment("x */ evil(); /* y"), python_comment("naïve"), md_cell("a|b `c`")
('x * / evil(); / * y', 'na?ve', "a\\\\|b 'c'")
"""

from __future__ import annotations


class Namespace:
    """Hands out unique names: the first request for `base` gets it, later ones `base_1`, ...

    >>> ns = Namespace()
    >>> ns.unique("Add"), ns.unique("Add"), ns.unique("Add_1"), ns.unique("Add")
    ('Add', 'Add_1', 'Add_1_1', 'Add_2')
    """

    __slots__ = ("_next", "_taken")

    def __init__(self, taken=()):
        self._taken: set[str] = set(taken)
        self._next: dict[str, int] = {}

    def unique(self, base: str) -> str:
        if base not in self._taken:
            self._taken.add(base)
            return base
        i = self._next.get(base, 1)
        while f"{base}_{i}" in self._taken:
            i += 1
        self._next[base] = i + 1
        name = f"{base}_{i}"
        self._taken.add(name)
        return name

    def reserve(self, name: str) -> bool:
        """Take `name` exactly; False if it was taken already."""
        if name in self._taken:
            return False
        self._taken.add(name)
        return True

    def release(self, name: str) -> None:
        self._taken.discard(name)

    def __contains__(self, name: str) -> bool:
        return name in self._taken


def file_stem(name: str, default: str = "graph") -> str:
    """A graph or kernel name as a portable file name stem: ASCII letters, digits, `_`, `-`.

    >>> file_stem("Block/FFN: dōuble"), file_stem("")
    ('Block_FFN__d_uble', 'graph')
    """
    cleaned = "".join(c if (c.isascii() and c.isalnum()) or c in "_-" else "_" for c in name)
    return cleaned[:40] or default


def c_comment(text: str) -> str:
    """`text` made safe inside a C block comment (no `*/`, no newlines, ASCII only)."""
    text = str(text).replace("*/", "* /").replace("/*", "/ *")
    return python_comment(text)


def python_comment(text: str) -> str:
    """`text` made safe inside a `#` comment: printable ASCII only, on one line."""
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in str(text))[:200]


def md_cell(text: str) -> str:
    """`text` safe inside a Markdown table cell and code span (on one line, no `|` or
    backtick of its own)."""
    text = "".join(c if c.isprintable() else " " for c in str(text))
    return text.replace("|", "\\|").replace("`", "'")
