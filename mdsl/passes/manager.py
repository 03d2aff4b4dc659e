"""The pass registry and the PassManager: the contract every graph pass follows.

A pass is a function `fn(g: Graph) -> PassResult`, registered by name with `@register`. It
receives a graph it may mutate freely (the manager hands it a private copy) and reports
the graph after it ran, whether anything changed and a one-line summary. The manager runs
passes in order (optionally to a fixed point), verifies the graph after each pass in debug
mode (`debug=True` or the environment variable `MDSL_DEBUG=1`), records one `PassLogEntry`
per pass run on the result's `pass_log`, and turns a failing pass into an error naming it
and the passes that ran before it.

>>> import mdsl
>>> from mdsl.passes import PassResult, register
>>> @register("count_nodes_demo")
... def count_nodes_demo(g):
...     return PassResult(g, changed=False, summary=f"{len(g)} nodes")
>>> with mdsl.Graph("demo") as g:
...     g.output(g.input("x", (2,)) * 1.0, "y")
>>> g2 = mdsl.passes.run(g, ["count_nodes_demo", "simplify", "dce"])
>>> [(e.name, e.changed, e.nodes_before, e.nodes_after) for e in g2.pass_log]
[('count_nodes_demo', False, 4, 4), ('simplify', True, 4, 2), ('dce', False, 2, 2)]
>>> len(g)   # the argument is never mutated
4
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import Graph
from mdsl.ir.pass_log import PassLog
from mdsl.ir.rewrite import all_graphs, clone_graph
from mdsl.ir.tracebacks import api_boundary
from mdsl.ir.verify import verify
from mdsl.log import format_seconds

# Where a pass sits in `mdsl.optimize`'s pipeline (see `optimize_pipeline`):
#   "cleanup" - cheap local passes repeated to a fixed point (fold, simplify, cse, dce)
#   "rewrite" - structural rewrites (Conv+BN folding, MatMul+Add, user pattern passes)
#   "layout"  - format assignment and conversion insertion, after all rewrites
#   "fusion"  - fusion grouping, last: it records groups no later pass may invalidate
PHASES = ("cleanup", "rewrite", "layout", "fusion")
# Phase of well-known passes registered without an explicit `phase=`.
_DEFAULT_PHASES = {"layout": "layout", "fuse": "fusion"}
# Built-in passes run first in their phase, in this order; other passes follow in the
# order they were registered.
BUILTIN_ORDER = (
    "fold_constants",
    "simplify",
    "cse",
    "dce",
    "fold_pad_into_conv",
    "fold_conv_bn",
    "fuse_matmul_add",
)
MAX_LEVEL = 3
DEFAULT_MAX_ITERATIONS = 8


@dataclass
class PassResult:
    """What a pass returns: the graph after it ran (may be the same object, mutated),
    whether it changed anything, and one line saying what it did."""

    graph: Graph
    changed: bool
    summary: str = ""


@dataclass(frozen=True, slots=True)
class PassLogEntry:
    """One run of one pass, as recorded on `g.pass_log`."""

    name: str
    changed: bool
    nodes_before: int
    nodes_after: int
    summary: str = ""
    seconds: float = 0.0

    def __str__(self) -> str:
        mark = "*" if self.changed else " "
        counts = f"{self.nodes_before} -> {self.nodes_after} nodes"
        took = format_seconds(self.seconds)
        return f"{mark} {self.name:<22} {counts:<18} {took:>8}  {self.summary}".rstrip()


@dataclass(frozen=True, slots=True)
class PassInfo:
    """A registry entry: the pass function and where `mdsl.optimize` runs it."""

    name: str
    fn: Callable[[Graph], PassResult]
    levels: frozenset[int]
    phase: str
    doc: str = ""


class PassError(GraphError):
    """A pass raised or produced an invalid graph (the message names it)."""


_REGISTRY: dict[str, PassInfo] = {}
_LOCK = threading.Lock()


def register(
    name: str | Callable | None = None, *, levels: Sequence[int] = (), phase: str | None = None
):
    """Register a pass `fn(g: Graph) -> PassResult` under `name` (default: the function's).

    `levels`: the `mdsl.optimize` levels (1..3) whose pipeline includes the pass; empty
    means the pass runs only when named (`mdsl.passes.run(g, [name])`). `phase`: where in
    that pipeline it runs, one of PHASES (default "rewrite"; "layout" for a pass named
    "layout", "fusion" for one named "fuse"). A later registration of a name replaces the
    earlier one. Usable as `@register`, `@register("name", levels=(2, 3))` or a call.

    >>> import mdsl
    >>> @mdsl.passes.register
    ... def noop_demo(g):
    ...     return mdsl.passes.PassResult(g, changed=False)
    >>> mdsl.passes.get_pass("noop_demo").phase, mdsl.passes.get_pass("fold_conv_bn").levels
    ('rewrite', frozenset({2, 3}))
    """
    if callable(name):  # bare @register
        return register()(name)
    if name is not None and (not isinstance(name, str) or not name):
        raise GraphError(f"a pass name must be a non-empty string, got {name!r}")
    level_set = frozenset(_checked_levels(levels))

    def decorate(fn: Callable[[Graph], PassResult]):
        if not callable(fn):
            raise GraphError(f"register() decorates a function, got {type(fn).__name__}")
        pass_name = name or fn.__name__
        pass_phase = phase or _DEFAULT_PHASES.get(pass_name, "rewrite")
        if pass_phase not in PHASES:
            raise GraphError(f"pass {pass_name!r}: phase must be one of {PHASES}, got {phase!r}")
        info = PassInfo(pass_name, fn, level_set, pass_phase, (fn.__doc__ or "").strip())
        with _LOCK:
            _REGISTRY[pass_name] = info
        return fn

    return decorate


def _checked_levels(levels) -> list[int]:
    if isinstance(levels, int):
        levels = (levels,)
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= MAX_LEVEL:
            raise GraphError(f"pass levels must be ints in 1..{MAX_LEVEL}, got {levels!r}")
    return list(levels)


def get_pass(name: str) -> PassInfo:
    """The registry entry of pass `name` (GraphError listing the known ones if missing)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise GraphError(f"unknown pass {name!r}; registered passes: {known}") from None


def registered_passes() -> dict[str, PassInfo]:
    """All registered passes by name, in registration order."""
    with _LOCK:
        return dict(_REGISTRY)


def debug_enabled(debug: bool | None = None) -> bool:
    """`debug` if given, else whether the environment sets MDSL_DEBUG=1."""
    if debug is not None:
        return debug
    return os.environ.get("MDSL_DEBUG", "") not in ("", "0")


def count_nodes(g: Graph) -> int:
    """Nodes of `g` and of every nested control-flow subgraph."""
    return sum(len(sub) for sub in all_graphs(g))


def _as_info(p) -> PassInfo:
    if isinstance(p, PassInfo):
        return p
    if isinstance(p, str):
        return get_pass(p)
    if callable(p):  # an unregistered pass function
        return PassInfo(getattr(p, "__name__", "pass"), p, frozenset(), "rewrite")
    raise GraphError(f"a pass is a registered name or a function, got {p!r:.60}")


class PassManager:
    """Runs passes in order over a private copy of a graph.

    `fixed_point=True` repeats the whole list until no pass changes the graph (at most
    `max_iterations` rounds). `debug` (default: MDSL_DEBUG) verifies the graph before the
    first pass and after each one.

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (2,))
    ...     g.output((x + 0.0) * 1.0, "y")
    >>> pm = mdsl.passes.PassManager(["simplify", "dce"], fixed_point=True)
    >>> [n.op_type for n in pm.run(g).nodes]
    ['Input', 'Output']
    """

    def __init__(
        self,
        passes: Sequence,
        *,
        fixed_point: bool = False,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        debug: bool | None = None,
        history: list[str] | None = None,
    ):
        if isinstance(passes, (str, bytes)) or not isinstance(passes, Sequence):
            raise GraphError(f"passes must be a list of pass names, got {passes!r:.60}")
        self.passes = [_as_info(p) for p in passes]
        self.fixed_point = fixed_point
        self.max_iterations = max(1, int(max_iterations))
        self.debug = debug_enabled(debug)
        # the passes run so far (shared by the managers of one schedule): a failure names them
        self.history: list[str] = [] if history is None else history

    def run(self, g: Graph) -> Graph:
        """A new graph: `g` copied, then transformed by the passes (`g` is not touched)."""
        if not isinstance(g, Graph):
            raise GraphError(f"passes run on an mdsl.Graph, got {type(g).__name__}")
        work = clone_graph(g)
        if self.debug:
            self._verify(work, None)
        return self.run_in_place(work)[0]

    def run_in_place(self, g: Graph) -> tuple[Graph, bool]:
        """Run the passes on `g` itself; returns (resulting graph, whether any changed)."""
        any_change = False
        for _ in range(self.max_iterations if self.fixed_point else 1):
            round_change = False
            for info in self.passes:
                g, changed = self.run_pass(info, g)
                round_change |= changed
            any_change |= round_change
            if not round_change:
                break
        return g, any_change

    def run_pass(self, info: PassInfo, g: Graph) -> tuple[Graph, bool]:
        """Run one pass on `g` itself (logged on `pass_log`, verified in debug mode);
        returns (resulting graph, whether it changed); a PassError names what ran before."""
        before = count_nodes(g)
        log = list(g.pass_log)
        start = time.perf_counter()
        try:
            result = info.fn(g)
        except MdslError as e:
            raise self._failure(info, f"{type(e).__name__}: {e}") from e
        except Exception as e:
            raise self._failure(info, f"raised {type(e).__name__}: {e}") from e
        if not isinstance(result, PassResult) or not isinstance(result.graph, Graph):
            raise self._failure(info, f"returned {type(result).__name__}, not a PassResult")
        out = result.graph
        if self.debug:
            self._verify(out, info)
        elapsed = time.perf_counter() - start
        entry = PassLogEntry(
            info.name, bool(result.changed), before, count_nodes(out), result.summary, elapsed
        )
        out.pass_log = PassLog([*log, entry])
        self.history.append(info.name)
        return out, bool(result.changed)

    def _verify(self, g: Graph, info: PassInfo | None) -> None:
        try:
            verify(g)
        except GraphError as e:
            if info is None:
                raise GraphError(f"the graph is invalid before any pass ran: {e}") from None
            raise self._failure(info, f"left an invalid graph: {e}") from None

    def _failure(self, info: PassInfo, what: str) -> PassError:
        before = ", ".join(self.history) if self.history else "no other pass"
        return PassError(f"pass {info.name!r} (run after {before}) {what}")


def run(g: Graph, passes: Sequence, *, fixed_point: bool = False, debug: bool | None = None):
    """Run registered passes by name, in order, on a copy of `g`; returns the new graph.

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (2,))
    ...     g.output(x + (mdsl.ops.exp(g.const("c", 0.0)) - 1.0), "y")
    >>> g2 = mdsl.passes.run(g, ["fold_constants", "dce"])
    >>> [n.op_type for n in g2.nodes]
    ['Input', 'Const', 'Add', 'Output']
    """
    return PassManager(passes, fixed_point=fixed_point, debug=debug).run(g)


def optimize_pipeline(level: int) -> list[tuple[list[PassInfo], bool]]:
    """The groups of passes `mdsl.optimize` runs at `level`: (passes, to a fixed point?).

    cleanup passes to a fixed point; then rewrites interleaved with cleanup to a fixed
    point; then layout passes; then fusion passes, each once.
    """
    registered = list(registered_passes().values())
    chosen = sorted(
        (p for p in registered if level in p.levels),
        key=lambda p: (
            BUILTIN_ORDER.index(p.name) if p.name in BUILTIN_ORDER else len(BUILTIN_ORDER),
            registered.index(p),
        ),
    )
    by_phase = {phase: [p for p in chosen if p.phase == phase] for phase in PHASES}
    groups: list[tuple[list[PassInfo], bool]] = []
    if by_phase["cleanup"]:
        groups.append((by_phase["cleanup"], True))
    if by_phase["rewrite"]:
        groups.append((by_phase["rewrite"] + by_phase["cleanup"], True))
    for phase in ("layout", "fusion"):
        if by_phase[phase]:
            groups.append((by_phase[phase], False))
    return groups


@api_boundary
def optimize(g: Graph, level: int = 2, *, debug: bool | None = None) -> Graph:
    """A new, optimized graph (`g` is never mutated); `pass_log` lists every pass run.

    Level 0 copies; 1 folds constants, simplifies, removes common subexpressions and dead
    nodes; 2 adds Conv+BatchNorm folding, MatMul+Add -> Gemm and fusion grouping; 3 adds
    layout transformation (when those passes are registered).

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (2, 3))
    ...     g.output(x.T.T * (g.const("two", 2.0) - 1.0), "y")
    >>> [n.op_type for n in mdsl.optimize(g, level=1).nodes]
    ['Input', 'Output']
    """
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= MAX_LEVEL:
        raise GraphError(f"optimization level must be an int in 0..{MAX_LEVEL}, got {level!r}")
    if not isinstance(g, Graph):
        raise GraphError(f"mdsl.optimize takes an mdsl.Graph, got {type(g).__name__}")
    work = clone_graph(g)
    if debug_enabled(debug):
        PassManager([], debug=True)._verify(work, None)
    for step in run_schedule(work, optimize_pipeline(level), debug=debug):
        work = step.after
    return work


@dataclass(frozen=True, slots=True)
class PassStep:
    """One pass run of a schedule: the graph before and after it (`after` is `before`
    when it failed, `failure` then says how)."""

    info: PassInfo
    before: Graph
    after: Graph
    changed: bool
    failure: str = ""


def run_schedule(
    g: Graph, schedule, *, debug: bool | None = None, snapshots: bool = False
) -> Iterator[PassStep]:
    """Run `schedule` (groups of (passes, to a fixed point?), as `optimize_pipeline`
    gives) over `g` in place, one pass at a time, as `mdsl.optimize` does: yields each
    pass run. With `snapshots=True` each pass runs on a copy, so every step's `before`
    stays as it was, and a failing pass ends the run with a step saying so (pass
    bisection replays the pipeline this way); otherwise a failure raises PassError."""
    history: list[str] = []
    for passes, fixed in schedule:
        manager = PassManager(passes, fixed_point=fixed, debug=debug, history=history)
        for _ in range(manager.max_iterations if fixed else 1):
            round_change = False
            for info in manager.passes:
                before = g
                try:
                    g, changed = manager.run_pass(info, clone_graph(g) if snapshots else g)
                except MdslError as e:
                    if not snapshots:
                        raise
                    yield PassStep(info, before, before, False, str(e))
                    return
                yield PassStep(info, before, g, changed)
                round_change |= changed
            if not round_change:
                break
