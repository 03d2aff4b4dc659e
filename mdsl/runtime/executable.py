"""The compiled artifact: `mdsl.compile(g)` returns an Executable.

An Executable holds the optimized graph and, per shape signature of its symbolic dims, a
compiled variant (specialized graph -> Plan -> C source -> shared library). One call
binds the feeds, picks the variant, and runs the whole graph with one foreign call.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mdsl.ir.errors import CompileError
from mdsl.ir.graph import Graph
from mdsl.runtime.feeds import bind_feeds

MAX_VARIANTS = 16


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """One kernel of a compiled variant: its name, kind and the nodes it computes."""

    name: str
    kind: str
    nodes: tuple[str, ...]


class Executable:
    """A compiled graph: call it with numpy feeds (`exe(x=arr)` or `exe.run({"x": arr})`).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph("axpy") as g:
    ...     x = g.input("x", ("N",))
    ...     g.output(x * 2.0 + 1.0, "y")
    >>> exe = mdsl.compile(g, backend="c")
    >>> exe(x=np.arange(3, dtype=np.float32))["y"]
    array([1., 3., 5.], dtype=float32)
    """

    def __init__(self, graph: Graph, backend, *, threads: int | None = None):
        self.graph = graph
        self.backend = backend
        self.threads = threads
        self._variants: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()
        self._static_inputs = _static_input_specs(graph)
        if self._static_inputs is not None:
            self._only_variant = self._variant({})  # static graphs compile now

    # -- running -------------------------------------------------------------------------------
    def __call__(self, feeds: Mapping | None = None, /, **kwargs) -> dict[str, np.ndarray]:
        return self.run({**(feeds or {}), **kwargs})

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._static_inputs is not None and _matches(self._static_inputs, feeds):
            return self._only_variant.run(feeds)  # fast path: nothing to bind or convert
        env, symbols = bind_feeds(self.graph, feeds)
        return self._variant(symbols).run(env)

    def _variant(self, symbols: dict[str, int]):
        key = tuple(sorted(symbols.items()))
        with self._lock:
            variant = self._variants.get(key)
            if variant is not None:
                self._variants.move_to_end(key)
                return variant
        variant = self.backend.build(self.graph, symbols, self.threads)
        with self._lock:
            self._variants[key] = variant
            while len(self._variants) > MAX_VARIANTS:
                self._variants.popitem(last=False)
        return variant

    # -- inspection -----------------------------------------------------------------------------
    def _latest(self):
        if not self._variants:
            raise CompileError(
                "this executable has symbolic inputs and has not run yet; call it once "
                "(a variant is compiled per shape signature) before inspecting it"
            )
        return next(reversed(self._variants.values()))

    @property
    def sources(self) -> dict[str, str]:
        """Generated source files of the latest variant: file name -> text."""
        return self._latest().sources

    @property
    def memory(self):
        """The latest variant's memory plan (.arena_bytes, .naive_bytes, .lower_bound_bytes)."""
        return self._latest().plan.memory

    @property
    def kernels(self) -> list[KernelInfo]:
        return self._latest().kernel_infos()

    @property
    def plan(self):
        return self._latest().plan

    def __repr__(self) -> str:
        return f"Executable({self.graph.name!r}, backend={self.backend.name!r}, {len(self._variants)} variant(s))"


def _static_input_specs(graph: Graph) -> dict | None:
    """name -> (numpy dtype, shape) when every input is static, else None."""
    inputs = graph.inputs
    if not all(t.type.is_static for t in inputs.values()):
        return None
    return {name: (t.dtype.np, tuple(t.shape)) for name, t in inputs.items()}


def _matches(specs: dict, feeds) -> bool:
    """Feeds that need no checking beyond this: exact names, ndarray, dtype and shape."""
    if type(feeds) is not dict or len(feeds) != len(specs):
        return False
    for name, (dtype, shape) in specs.items():
        a = feeds.get(name)
        if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape:
            return False
    return True
