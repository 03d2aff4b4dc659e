"""`mdsl.compile`: optimize a graph and build an Executable for a backend."""

from __future__ import annotations

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
) -> Executable:
    """Optimize `g` (`mdsl.optimize(g, opt_level)`) and compile it for `backend`.

    "c": fused C kernels built with the system compiler (BLAS for GEMM, OpenMP threads);
    "numba": the same kernels as numba functions; "python": the reference interpreter.
    `threads` sets the OpenMP/BLAS thread count (default: all cores).
    """
    from mdsl.passes.manager import optimize

    if backend not in BACKENDS:
        raise CompileError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    optimized = optimize(g, level=opt_level)
    return Executable(optimized, _backend(backend, march_native), threads=threads)


def _backend(name: str, march_native: bool):
    if name == "c":
        from mdsl.runtime.c_backend import CBackend

        return CBackend(march_native)
    if name == "python":
        from mdsl.runtime.python_backend import PythonBackend

        return PythonBackend()
    from mdsl.runtime.numba_backend import NumbaBackend

    return NumbaBackend()
