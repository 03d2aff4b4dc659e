"""The "python" backend: the reference interpreter behind the Executable interface."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mdsl.codegen.plan import Plan
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node
from mdsl.targets.feeds import bind_feeds
from mdsl.targets.python.interpreter import Interpreter, interpret


@dataclass
class PythonVariant:
    graph: Graph
    sources = {}
    plan: Plan | None = None

    def run(self, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return interpret(self.graph, env)

    def run_profiled(self, env: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`run`, also returning each node's (start after the run began, duration) in
        seconds: one row per node of the graph but its inputs, constants and outputs."""
        env, symbols = bind_feeds(self.graph, env)
        timed = _TimedInterpreter(self.graph)
        outputs = timed.run_graph(self.graph, env, symbols)
        return outputs, timed.timings

    def kernel_infos(self):
        return []


class _TimedInterpreter(Interpreter):
    """Times each node of the top-level graph (not inputs and constants; a control-flow
    node as a whole)."""

    def __init__(self, graph: Graph):
        super().__init__()
        timed = [n for n in graph if n.op_type not in (INPUT, CONST, OUTPUT)]
        self.row = {id(n): i for i, n in enumerate(timed)}
        self.timings = np.zeros((len(timed), 2))
        self.t0 = time.perf_counter()

    def run_node(self, node: Node, values: dict, env: dict, symbols: dict) -> list:
        start = time.perf_counter()
        results = super().run_node(node, values, env, symbols)
        row = self.row.get(id(node))
        if row is not None:
            self.timings[row] = start - self.t0, time.perf_counter() - start
        return results
