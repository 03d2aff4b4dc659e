"""The "python" backend: the reference interpreter behind the Executable interface."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsl.codegen.plan import Plan
from mdsl.ir.graph import Graph
from mdsl.targets.python.interpreter import interpret


class PythonBackend:
    name = "python"
    symbolic = True  # the interpreter runs every shape signature

    def build(self, graph: Graph, symbols: dict[str, int], threads: int | None):
        return PythonVariant(graph)


@dataclass
class PythonVariant:
    graph: Graph
    sources = {}
    plan: Plan | None = None

    def run(self, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs as fresh arrays, as every compiled backend returns them: never the
        caller's input (an output that is an input), never one array for two outputs."""
        outputs = interpret(self.graph, env)
        fresh: dict[str, np.ndarray] = {}
        inputs = {id(a) for a in env.values()}
        seen: set[int] = set()
        for name, value in outputs.items():
            array = np.asarray(value)
            if id(value) in inputs or id(value) in seen or not array.flags.owndata:
                array = array.copy()
            seen.add(id(value))
            fresh[name] = array
        return fresh

    def kernel_infos(self):
        return []
