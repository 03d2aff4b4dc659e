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

    def __init__(
        self,
        graph: Graph,
        backend,
        *,
        threads: int | None = None,
        debug_outputs: Mapping[str, str] | None = None,
        variants: Mapping[tuple, object] | None = None,
    ):
        self.graph = graph
        self.backend = backend
        self.threads = threads
        # debug builds: the outputs added to materialize every tensor -> tensor names
        self.debug_outputs = None if debug_outputs is None else dict(debug_outputs)
        self._variants: OrderedDict[tuple, object] = OrderedDict(variants or {})
        self._lock = threading.Lock()
        self._static_inputs = _static_input_specs(graph)
        if self._static_inputs is not None:
            self._only_variant = self._variant({})  # static graphs compile now

    # -- running -------------------------------------------------------------------------------
    def __call__(self, feeds: Mapping | None = None, /, **kwargs) -> dict[str, np.ndarray]:
        return self.run({**(feeds or {}), **kwargs})

    def run(
        self, feeds: Mapping[str, np.ndarray], *, capture: bool = False
    ) -> dict[str, np.ndarray]:
        """Outputs by name; with `capture=True` (a `debug=True` build) every tensor by
        name, as `mdsl.interpret(g, feeds, capture=True)` returns them."""
        if capture or self.debug_outputs:
            return self._run_debug(feeds, capture)
        if self._static_inputs is not None and _matches(self._static_inputs, feeds):
            return self._only_variant.run(feeds)  # fast path: nothing to bind or convert
        env, symbols = bind_feeds(self.graph, feeds)
        return self._variant(symbols).run(env)

    def _run_debug(self, feeds, capture: bool) -> dict[str, np.ndarray]:
        from mdsl.runtime.materialize import split_debug_outputs

        env, symbols = bind_feeds(self.graph, feeds)
        outputs = self._variant(symbols).run(env)
        captured_from = env if capture else None
        return split_debug_outputs(self.graph, outputs, self.debug_outputs, captured_from)

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

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int = 10, *, warmup: int = 1):
        """Time every kernel of `runs` runs on `feeds` (after `warmup` untimed ones): a
        `mdsl.runtime.profile.Profile` with `.table()` and `.to_chrome_trace(path)`.

        The "c" backend runs a profiling build of the variant (a separate cached library
        with a clock read around each kernel; the normal build has no timers); "numba"
        times each kernel from its Python driver, "python" each node.

        >>> import numpy as np, mdsl
        >>> with mdsl.Graph("axpy") as g:
        ...     x = g.input("x", ("N",))
        ...     g.output(x * 2.0 + 1.0, "y")
        >>> prof = mdsl.compile(g, backend="c").profile({"x": np.ones(64, np.float32)}, runs=3)
        >>> [(k.name, k.flops, k.bytes, len(k.times)) for k in prof.kernels]
        [('k3_mul_add', 128, 512, 3)]
        """
        from mdsl.runtime.profile import profile_executable

        return profile_executable(self, feeds, runs=runs, warmup=warmup)

    # -- saving and inspection -------------------------------------------------------------------
    def save(self, path, *, key: bytes | str | None = None) -> None:
        """Save the graph and every compiled variant (sources, libraries, SHA-256 of each)
        to directory `path` (a zip when it ends in .zip); `mdsl.load_executable` reads it
        back without compiling. `key` signs the manifest (HMAC-SHA256); see
        `mdsl.runtime.saved`."""
        from mdsl.runtime.saved import save_executable

        save_executable(self, path, key=key)

    def variants(self) -> dict[tuple, object]:
        """The compiled variants by shape signature (sorted (symbol, size) pairs)."""
        with self._lock:
            return dict(self._variants)

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
