"""`mdsl.compile`: optimize a graph and build an Executable for a backend."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, overload

from mdsl.ir.errors import CompileError
from mdsl.ir.graph import Graph
from mdsl.ir.tracebacks import api_boundary
from mdsl.log import get_logger, timed
from mdsl.runtime import compile_cache
from mdsl.runtime.executable import Executable, checked_threads
from mdsl.targets import registry

if TYPE_CHECKING:
    from mdsl.runtime.hetero import HeteroExecutable

_log = get_logger(__name__)


@overload
def compile(
    g: Graph,
    backend: str = ...,
    *,
    opt_level: int = ...,
    threads: int | None = ...,
    march_native: bool = ...,
    debug: bool = ...,
    devices: None = ...,
    specialize: dict[str, list[int]] | bool | None = ...,
) -> Executable: ...
@overload
def compile(
    g: Graph,
    backend: str = ...,
    *,
    opt_level: int = ...,
    threads: int | None = ...,
    march_native: bool = ...,
    debug: bool = ...,
    devices: dict[str, str],
    specialize: dict[str, list[int]] | bool | None = ...,
) -> HeteroExecutable: ...


@api_boundary
def compile(
    g: Graph,
    backend: str = "c",
    *,
    opt_level: int = 2,
    threads: int | None = None,
    march_native: bool = True,
    debug: bool = False,
    devices: dict[str, str] | None = None,
    specialize: dict[str, list[int]] | bool | None = None,
) -> Executable | HeteroExecutable:
    """Optimize `g` (`mdsl.optimize(g, opt_level)`) and compile it for `backend`.

    "c": fused C kernels built with the system compiler (BLAS for GEMM, OpenMP threads);
    "numba": the same kernels as numba functions; "python": the reference interpreter.
    Without a C compiler, "c" falls back to "numba" with a RuntimeWarning.
    `threads` sets the OpenMP/BLAS thread count (default: all cores).
    `debug=True` materializes every node's output (fused kernels store each member's
    value) so `exe.run(feeds, capture=True)` and `mdsl.compare` see every tensor.
    `devices={"cpu": "c", "npu:0": "numba"}` places and partitions `g` by device and
    compiles each partition with its device's backend (`mdsl.runtime.hetero`).

    Symbolic dims: "c" (and "python") build one variant for every shape signature, dims
    passed at run time and memory planned per signature. `specialize={"N": [1, 8, 32]}`
    also builds, now, a variant with N static for each listed size, used when a call's
    N matches (every combination when several symbols are listed; the others stay
    symbolic); `specialize=True` builds a static variant per signature met instead (as
    "numba" always does). See `mdsl.runtime.executable`.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph("scale") as g:
    ...     x = g.input("x", (mdsl.Dim("N", max=64), 4))
    ...     g.output(x * 2.0, "y")
    >>> exe = mdsl.compile(g, backend="c", specialize={"N": [1, 8]})
    >>> sorted(exe.variants())
    [(('N', 1),), (('N', 8),)]
    >>> exe(x=np.ones((3, 4), np.float32))["y"].shape, sorted(exe.variants())[0]
    ((3, 4), ())
    """
    from mdsl.ir.verify import check_nesting
    from mdsl.passes.manager import optimize

    check_nesting(g)
    threads = checked_threads(threads)
    if devices is not None:
        from mdsl.runtime.hetero import compile_hetero

        return compile_hetero(
            g, devices, opt_level=opt_level, threads=threads, march_native=march_native
        )
    if not isinstance(backend, str) or not registry.can(backend, "build"):
        buildable = registry.target_names("build")
        raise CompileError(f"unknown backend {backend!r}; expected one of {', '.join(buildable)}")
    target = make_backend(backend, march_native)
    options = {"backend": target.name, "opt_level": opt_level, "debug": debug}
    key = _cache_key(g, target, {**options, "specialize": specialize})
    if key is not None:
        cached = compile_cache.load(key, target, threads)
        if cached is not None:
            return cached
    with timed(_log, "optimize %r (level %d)", g.name, opt_level):
        optimized = optimize(g, level=opt_level)
    debug_outputs = None
    if debug:
        from mdsl.runtime.materialize import materialize_all

        debug_outputs = materialize_all(optimized)
    with timed(_log, "build %r for %s", g.name, backend):
        exe = Executable(
            optimized, target, threads=threads, debug_outputs=debug_outputs, specialize=specialize
        )
    if key is not None:
        compile_cache.store(key, exe)
    return exe


def _cache_key(g: Graph, target, options: dict) -> compile_cache.CompileKey | None:
    """The compile cache's key for this compile, or None when it is not cached (the
    cache turned off, a backend other than C)."""
    if target.name != "c" or not compile_cache.enabled():
        return None
    with timed(_log, "compile cache key of %r", g.name):
        return compile_cache.compile_key(g, target, options)


def make_backend(name: str, march_native: bool = True) -> registry.Target:
    """The target object an Executable of backend `name` builds with: `name`'s, or, on a
    machine where it cannot build (a C compiler missing), its fallback's, with a warning."""
    cls = registry.target_class(name)
    reason = getattr(cls, "unavailable", lambda: None)()
    fallback = getattr(cls, "fallback", None)
    if reason is not None and fallback:
        warnings.warn(
            f"{reason}: compiling with backend={fallback!r}", RuntimeWarning, stacklevel=3
        )
        name = fallback
    return registry.make_target(name, march_native=march_native)
