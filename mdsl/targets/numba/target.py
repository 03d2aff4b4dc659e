"""The "numba" target's registry entry: builds through `mdsl.targets.numba.backend`,
emits through `mdsl.targets.numba.emit` (numba is imported only when one is used)."""

from __future__ import annotations


class NumbaTarget:
    """Python modules of numba kernels (`backend="numba"`)."""

    name = "numba"
    symbolic = True  # one build serves every shape signature
    fuses = True

    def build(self, graph, symbols: dict[str, int], threads: int | None):
        from mdsl.targets.numba.backend import build_variant

        return build_variant(graph, symbols, threads)

    @staticmethod
    def emit_files(graph) -> dict[str, str | bytes]:
        from mdsl.targets.numba.emit import emit_files

        return emit_files(graph)
