"""`mdsl.compile`: optimize a graph and build an Executable for a backend."""

from __future__ import annotations

import warnings

from mdsl.ir.errors import CompileError
from mdsl.ir.graph import Graph
from mdsl.runtime.executable import Executable

BACKENDS = ("c", "numba", "python")


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
) -> Executable:
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
    from mdsl.passes.manager import optimize

    if devices is not None:
        from mdsl.runtime.hetero import compile_hetero

        return compile_hetero(
            g, devices, opt_level=opt_level, threads=threads, march_native=march_native
        )
    if backend not in BACKENDS:
        raise CompileError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    optimized = optimize(g, level=opt_level)
    debug_outputs = None
    if debug:
        from mdsl.runtime.materialize import materialize_all

        debug_outputs = materialize_all(optimized)
    return Executable(
        optimized,
        _backend(backend, march_native),
        threads=threads,
        debug_outputs=debug_outputs,
        specialize=specialize,
    )


def backend_class(name: str):
    """The class of backend `name` (not instantiated)."""
    if name == "c":
        from mdsl.targets.c.backend import CBackend

        return CBackend
    if name == "python":
        from mdsl.targets.python.backend import PythonBackend

        return PythonBackend
    from mdsl.targets.numba.backend import NumbaBackend

    return NumbaBackend


def _backend(name: str, march_native: bool):
    if name == "c" and not _has_c_compiler():
        warnings.warn(
            "no C compiler found (set $CC or install gcc): compiling with backend='numba'",
            RuntimeWarning,
            stacklevel=3,
        )
        name = "numba"
    if name == "c":
        from mdsl.targets.c.backend import CBackend

        return CBackend(march_native)
    if name == "python":
        from mdsl.targets.python.backend import PythonBackend

        return PythonBackend()
    from mdsl.targets.numba.backend import NumbaBackend

    return NumbaBackend()


def _has_c_compiler() -> bool:
    from mdsl.codegen.toolchain import find_compiler

    return find_compiler() is not None
