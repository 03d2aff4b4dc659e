"""Names, and user strings on their way into generated files: the one place unique names
are made (nodes, layers) and user text is made safe for a file name, an identifier
(kernel and function names), a C or Python comment, or a Markdown table cell. Every
target and every report uses these.

>>> c_comment("x */ evil(); /* y"), python_comment("naïve"), md_cell("a|b `c`")
('x * / evil(); / * y', 'na?ve', "a\\\\|b 'c'")
"""

from __future__ import annotations

import keyword


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


def identifier_stem(name: str) -> str:
    """A graph name as the stem of C identifiers and project folders: letters, digits and
    `_`, never a leading digit or `_` (the AscendC op project's names).

    >>> identifier_stem("3-layer mlp"), identifier_stem("__")
    ('g_3_layer_mlp', 'graph')
    """
    stem = "".join(c if c.isalnum() else "_" for c in name).strip("_")[:40] or "graph"
    return stem if not stem[0].isdigit() else f"g_{stem}"


def ascii_word(text: str, limit: int) -> str:
    """`text` lowered to ASCII letters and digits, for kernel names: op types may be any
    Python identifier (non-ASCII letters too), C identifiers are ASCII only.

    >>> ascii_word("LayerNormalization", 12), ascii_word("Ü", 8)
    ('layernormali', 'op')
    """
    return "".join(c for c in text.lower() if c.isascii() and c.isalnum())[:limit] or "op"


def python_identifier(name: str, reserved=frozenset()) -> str:
    """`name` as a Python identifier of ASCII characters, never a keyword nor one of
    `reserved` (a generated module's own names).

    >>> python_identifier("k0_add+relu"), python_identifier("2x"), python_identifier("rt", {"rt"})
    ('k0_add_relu', 'k_2x', 'rt_')
    """
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "k_" + cleaned
    return cleaned + "_" if keyword.iskeyword(cleaned) or cleaned in reserved else cleaned


def c_comment(text: str) -> str:
    """`text` made safe inside a C block comment (no `*/`, no newlines, ASCII only)."""
    text = str(text).replace("*/", "* /").replace("/*", "/ *")
    return python_comment(text)


def python_comment(text: str) -> str:
    """`text` made safe inside a `#` comment: printable ASCII only, on one line."""
    text = str(text)[:200]
    if text.isascii() and text.isprintable():  # the usual case, without a loop per character
        return text
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


def md_cell(text: str) -> str:
    """`text` safe inside a Markdown table cell and code span (on one line, no `|` or
    backtick of its own)."""
    text = "".join(c if c.isprintable() else " " for c in str(text))
    return text.replace("|", "\\|").replace("`", "'")
