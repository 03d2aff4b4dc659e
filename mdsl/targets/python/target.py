"""The "python" target's registry entry: the reference interpreter as a backend."""

from __future__ import annotations


class PythonTarget:
    """The numpy reference interpreter behind the Executable interface (`backend="python"`)."""

    name = "python"
    symbolic = True  # the interpreter runs every shape signature
    fuses = False  # it runs node by node

    def build(self, graph, symbols: dict[str, int], threads: int | None):
        from mdsl.targets.python.backend import PythonVariant

        return PythonVariant(graph)
