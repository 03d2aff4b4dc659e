"""The compiled artifact: `mdsl.compile(g)` returns an Executable.

An Executable holds the optimized graph and its compiled variants (graph -> Plan ->
C source -> shared library). One call binds the feeds, picks the variant, and runs the
whole graph with one foreign call.

Variants of a graph with symbolic dims, for a backend that builds symbolic code ("c",
"python"):

- the **symbolic build** (signature key `()`, built by `mdsl.compile`, so a first call
  compiles nothing): one variant for every shape signature,
  its kernels taking the dims as run-time arguments and its memory planned per
  signature at run time (`mdsl.targets.signatures`);
- **specialized** variants, built ahead of time for `specialize={"N": [1, 8, 32]}`:
  every combination of the listed sizes gets a variant with those symbols made static
  (the symbols not listed stay symbolic), used when a call's sizes match, the symbolic
  build otherwise (the Ascend "dynamic gears" idea: each gear is one more library,
  and sizes between gears still run, symbolically);
- **per-signature** variants, each specialized for every symbol of one signature, in
  a bounded LRU (MAX_VARIANTS): with `specialize=True`, on a backend without symbolic
  builds ("numba"), and when the symbolic build is impossible (a kernel that needs
  static dims, e.g. a convolution over symbolic spatial dims: `NotSymbolic`). These are
  built by the first call of their signature, which logs that it compiles (logger
  "mdsl.compile", level INFO).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from mdsl.ir.errors import CompileError, ExecutionError
from mdsl.ir.graph import Graph
from mdsl.log import get_logger, progress
from mdsl.targets.feeds import FeedMatcher, bind_feeds
from mdsl.targets.registry import KernelInfo

LOG = get_logger("mdsl.compile")
MAX_VARIANTS = 16
MAX_THREADS = 1024  # OpenMP and BLAS thread pools larger than this fail or crash
SYMBOLIC = ()  # the signature key of the symbolic build


def checked_threads(threads) -> int | None:
    """`threads` (None: all cores) when it is an int in [1, MAX_THREADS], else CompileError.

    >>> checked_threads(4), checked_threads(None)
    (4, None)
    """
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise CompileError(f"threads must be an int or None, got {type(threads).__name__}")
    if not 1 <= threads <= MAX_THREADS:
        raise CompileError(f"threads must be in [1, {MAX_THREADS}], got {threads}")
    return int(threads)


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
        specialize: Mapping[str, Sequence[int]] | bool | None = None,
    ):
        self.graph = graph
        self.backend = backend
        self.threads = checked_threads(threads)
        # debug builds: the outputs added to materialize every tensor -> tensor names
        self.debug_outputs = None if debug_outputs is None else dict(debug_outputs)
        self.specialize = _checked_specialize(graph, specialize)
        self._variants: OrderedDict[tuple, object] = OrderedDict()  # per signature, LRU
        self._pinned: dict[tuple, object] = dict(variants or {})  # symbolic, specialized
        self._latest_variant = next(reversed(self._pinned.values()), None)
        self.symbolic_failure: str | None = None  # why the symbolic build is impossible
        self._lock = threading.Lock()
        self._feeds = FeedMatcher(graph)
        self._static_inputs = all(t.type.is_static for t in graph.inputs.values())
        self._single_variant = None  # the variant of every call, when there is only one
        if self._static_inputs:
            self._single_variant = self._variant({})  # static graphs compile now
        elif isinstance(self.specialize, dict):
            self._build_specialized()
        elif variants is None and self._uses_symbolic_build():
            # now, in mdsl.compile: a first call compiles nothing
            self._latest_variant = self._build_symbolic()
        if self.specialize is None and list(self._pinned) == [SYMBOLIC]:
            self._single_variant = self._pinned[SYMBOLIC]

    # -- running -------------------------------------------------------------------------------
    def __call__(self, feeds: Mapping | None = None, /, **kwargs) -> dict[str, np.ndarray]:
        return self.run({**(feeds or {}), **kwargs})

    def run(
        self, feeds: Mapping[str, np.ndarray], *, capture: bool = False
    ) -> dict[str, np.ndarray]:
        """Outputs by name; with `capture=True` (a `debug=True` build) every tensor by
        name, as `mdsl.interpret(g, feeds, capture=True)` returns them."""
        try:
            if capture or self.debug_outputs:
                return self._run_debug(feeds, capture)
            symbols = self._feeds.symbols(feeds)  # None: feeds to convert, or a mistake
            if symbols is None:
                feeds, symbols = bind_feeds(self.graph, feeds)
            variant = self._single_variant
            return (self._variant(symbols) if variant is None else variant).run(feeds)
        except MemoryError:
            raise ExecutionError(
                f"graph {self.graph.name!r}: out of memory for these feeds' shapes"
            ) from None

    def _run_debug(self, feeds, capture: bool) -> dict[str, np.ndarray]:
        from mdsl.runtime.materialize import split_debug_outputs

        env, symbols = bind_feeds(self.graph, feeds)
        outputs = self._variant(symbols).run(env)
        captured_from = env if capture else None
        return split_debug_outputs(self.graph, outputs, self.debug_outputs, captured_from)

    def _variant(self, symbols: dict[str, int]):
        """The variant for a call with `symbols`: a specialized one matching them, else
        the symbolic build, else (none possible) one built for exactly this signature."""
        if self._single_variant is not None:
            return self._single_variant
        key = tuple(sorted(symbols.items()))
        with self._lock:
            variant = self._pinned.get(key) or self._matching_specialized(symbols)
            if variant is None and key in self._variants:
                variant = self._variants[key]
                self._variants.move_to_end(key)
            if variant is None and self._uses_symbolic_build():
                variant = self._pinned.get(SYMBOLIC)
        if variant is None and self._uses_symbolic_build():
            variant = self._build_symbolic()
        if variant is None:
            LOG.info(
                "compiling %r for %s (a %s variant, built on the first call of this signature)",
                self.graph.name,
                ", ".join(f"{k}={v}" for k, v in key) or "its static shapes",
                getattr(self.backend, "name", "backend"),
            )
            variant = self.backend.build(self.graph, symbols, self.threads)
            with self._lock:
                self._variants[key] = variant
                while len(self._variants) > MAX_VARIANTS:
                    self._variants.popitem(last=False)
        self._latest_variant = variant
        return variant

    def _uses_symbolic_build(self) -> bool:
        return (
            not self._static_inputs
            and self.specialize is not True
            and self.symbolic_failure is None
            and getattr(self.backend, "symbolic", False)
        )

    def _build_symbolic(self):
        """The symbolic build (once), or None when a kernel needs static dims."""
        from mdsl.codegen.plan import NotSymbolic

        try:
            variant = self.backend.build(self.graph, {}, self.threads)
        except NotSymbolic as e:
            self.symbolic_failure = e.message
            return None
        with self._lock:
            return self._pinned.setdefault(SYMBOLIC, variant)

    def _matching_specialized(self, symbols: dict[str, int]):
        if not isinstance(self.specialize, dict):
            return None
        key = tuple(sorted((s, symbols.get(s)) for s in self.specialize))
        return self._pinned.get(key)

    def _build_specialized(self) -> None:
        """One variant per combination of the sizes `specialize` lists, built now."""
        from mdsl.codegen.plan import NotSymbolic

        names = sorted(self.specialize)
        combinations = list(itertools.product(*(self.specialize[n] for n in names)))
        label = f"build {self.graph.name} variants"
        for sizes in progress(combinations, label, total=len(combinations), delay=1.0):
            key = tuple(zip(names, sizes))
            if key in self._pinned:
                continue
            try:
                self._pinned[key] = self.backend.build(self.graph, dict(key), self.threads)
            except NotSymbolic as e:  # the other symbols cannot stay symbolic: at run time
                self.symbolic_failure = e.message
                return

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
        """The compiled variants by shape signature: sorted (symbol, size) pairs of the
        symbols each is specialized for (`()`: the symbolic build, or a static graph's)."""
        with self._lock:
            return {**self._pinned, **self._variants}

    def _latest(self):
        if self._latest_variant is None:
            raise CompileError(
                "this executable has symbolic inputs and has not run yet; call it once "
                "(its variant is compiled on first use) before inspecting it"
            )
        return self._latest_variant

    @property
    def sources(self) -> dict[str, str]:
        """Generated source files of the latest variant: file name -> text."""
        return self._latest().sources

    @property
    def memory(self):
        """The latest variant's memory plan (.arena_bytes, .naive_bytes, .lower_bound_bytes);
        for a symbolic build, that of the latest shape signature it ran."""
        variant = self._latest()
        return getattr(variant, "memory", variant.plan.memory)

    @property
    def kernels(self) -> list[KernelInfo]:
        return self._latest().kernel_infos()

    @property
    def plan(self):
        return self._latest().plan

    def __repr__(self) -> str:
        count = len(self._variants) + len(self._pinned)
        return f"Executable({self.graph.name!r}, backend={self.backend.name!r}, {count} variant(s))"


def _checked_specialize(graph: Graph, specialize):
    """`specialize` as None, True, or symbol -> sorted distinct sizes (CompileError for
    symbols no input declares and sizes outside a symbol's range)."""
    if specialize is None or specialize is False:
        return None
    if specialize is True:
        return True
    if not isinstance(specialize, Mapping):
        raise CompileError(
            "specialize= takes True (a variant per shape signature) or a dict of symbol "
            f"-> sizes, e.g. {{'N': [1, 8, 32]}}; got {type(specialize).__name__}"
        )
    declared = _input_symbols(graph)
    out = {}
    for name, sizes in specialize.items():
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise CompileError(f"specialize=: no input has symbol {name!r} (symbols: {known})")
        sizes = [sizes] if isinstance(sizes, int) else list(sizes)
        dim = declared[name]
        for size in sizes:
            if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
                raise CompileError(f"specialize=: {name} sizes must be ints >= 0, got {size!r}")
            if size < dim.min or (dim.max is not None and size > dim.max):
                hi = "inf" if dim.max is None else dim.max
                raise CompileError(
                    f"specialize=: {name} = {size} is outside its range [{dim.min}, {hi}]"
                )
        if not sizes:
            raise CompileError(f"specialize=: no sizes listed for {name}")
        out[name] = sorted({int(v) for v in sizes})
    return out


def _input_symbols(graph: Graph) -> dict:
    """Symbol name -> its declared Dim (bare symbols of the inputs' shapes)."""
    from mdsl.ir.dim import Dim

    found: dict[str, Dim] = {}
    for t in graph.inputs.values():
        for d in t.shape:
            if isinstance(d, Dim) and d.name is not None:
                found.setdefault(d.name, d)
    return found
