"""The one place unique names are made: nodes, layers and (later) C identifiers."""

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
