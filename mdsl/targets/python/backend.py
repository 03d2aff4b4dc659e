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
        return interpret(self.graph, env)

    def kernel_infos(self):
        return []
