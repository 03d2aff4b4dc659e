"""`mdsl.emit`: write the code generated for a graph to a folder, for review or a build
by hand.

The graph is optimized (`opt_level`), specialized to concrete sizes (`symbols=` for its
symbolic dims) and handed to a target from a small registry. The "c" target writes:

    <graph>.c            the translation unit `mdsl.compile(g, backend="c")` builds
    Makefile             `make` builds <graph>.so with the flags mdsl uses
    README.md            entry point, buffers, constants, and kernels -> nodes
    constants/c<i>.npy   the constant buffers `mdsl_run` takes (`consts[i]`)
    mdsl_custom_op.h     the custom C op calling convention (when the graph calls one)

The "numba" target writes `<graph>.py` (the module `backend="numba"` loads: numba
kernels and a `run` driver), README.md and the constants.

"ascendc" writes the AscendC op project. Every target of `mdsl.targets.registry` with an
`emit_files(graph)` is one; a file writer plugs in with `register_target(name, render)`,
where `render(graph)` takes the optimized, static-shape graph and returns {relative file
name: text or bytes}.

>>> import mdsl, tempfile
>>> with mdsl.Graph("axpy") as g:
...     x = g.input("x", ("N",))
...     g.output(x * 2.0 + 1.0, "y")
>>> files = mdsl.emit(g, target="c", out_dir=tempfile.mkdtemp(), symbols={"N": 8})
>>> sorted(p.name for p in files)
['Makefile', 'README.md', 'axpy.c', 'c0.npy', 'c1.npy']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mdsl.ir.errors import CompileError
from mdsl.ir.graph import Graph
from mdsl.ir.tracebacks import api_boundary
from mdsl.targets import registry

Render = Callable[[Graph], Mapping[str, "str | bytes"]]


@dataclass(frozen=True, slots=True)
class EmitTarget:
    name: str
    render: Render
    description: str = ""


_TARGETS: dict[str, EmitTarget] = {}  # file writers registered here, besides the targets


def register_target(name: str, render: Render, *, description: str = "") -> None:
    """Make `mdsl.emit(g, target=name)` write the files `render(graph)` returns."""
    if not isinstance(name, str) or not name.isidentifier() or not callable(render):
        raise CompileError(f"register_target needs an identifier and a callable, got {name!r}")
    _TARGETS[name] = EmitTarget(name, render, description)


def targets() -> list[str]:
    """Names `emit` accepts: registered file writers and the targets that emit."""
    return sorted(set(_TARGETS) | set(registry.target_names("emit")))


@api_boundary
def emit(
    g: Graph,
    target: str = "c",
    out_dir="build/mdsl",
    *,
    symbols: Mapping[str, int] | None = None,
    opt_level: int = 2,
    **options,
) -> list[Path]:
    """Write the code `target` generates for `g` into `out_dir`; returns the files written.

    A graph with symbolic dims needs `symbols` (e.g. `{"N": 8}`): code is generated for
    concrete sizes. Existing files of the same names are overwritten; others are kept.
    `options` go to the target: "ascendc" takes `project="kernel_launch"` (default: kernels,
    host tiling and a runner for the whole graph) or `project="custom_op"` (a CANN
    custom-operator package of one op, see `mdsl.targets.ascendc.op_package`), `soc=` /
    `socs=` and the package's `op_type=`, `infer_shape=`, `feeds=`.
    """
    from mdsl.codegen.specialize import specialize
    from mdsl.passes.manager import optimize

    if not isinstance(g, Graph):
        raise CompileError(f"mdsl.emit takes an mdsl.Graph, got {type(g).__name__}")
    chosen = _target(target)
    values = _checked_symbols(g, symbols)
    optimized = optimize(g, level=opt_level)
    static = specialize(optimized, values) if values else optimized
    if options:
        try:
            files = chosen.render(static, **options)
        except TypeError as e:
            raise CompileError(
                f"emit target {target!r} does not take the options {sorted(options)}: {e}"
            ) from None
    else:
        files = chosen.render(static)
    return _write(Path(os.fspath(out_dir)), files)


def _target(name: str) -> EmitTarget:
    found = _TARGETS.get(name) if isinstance(name, str) else None
    if found is None and isinstance(name, str) and registry.can(name, "emit"):
        found = EmitTarget(name, registry.target_class(name).emit_files)
    if found is None:
        raise CompileError(f"unknown emit target {name!r}; known: {', '.join(targets())}")
    return found


def _checked_symbols(g: Graph, symbols) -> dict[str, int]:
    needed = sorted(
        {
            s
            for t in g.inputs.values()
            for d in t.shape
            if not isinstance(d, int)
            for s in d.free_symbols
        }
    )
    given = dict(symbols or {})
    missing = [s for s in needed if s not in given]
    if missing:
        raise CompileError(
            f"graph {g.name!r} has symbolic dims {', '.join(needed)}: code is generated for "
            f"concrete sizes, pass symbols={{{', '.join(f'{s!r}: ...' for s in missing)}}}"
        )
    unknown = sorted(set(given) - set(needed))
    if unknown:
        raise CompileError(f"symbols {', '.join(unknown)} are not dims of graph {g.name!r}")
    bad = [s for s, v in given.items() if type(v) is not int or v < 0]
    if bad:
        raise CompileError(f"symbols {', '.join(bad)} must be non-negative ints")
    return given


def _write(out_dir: Path, files: Mapping[str, str | bytes]) -> list[Path]:
    written = []
    for name, content in files.items():
        target = out_dir / _relative(name)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        except OSError as e:
            raise CompileError(f"cannot write {target}: {e.strerror or e}") from None
        written.append(target)
    return written


def _relative(name: str) -> Path:
    path = Path(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise CompileError(f"an emit target produced a file name outside out_dir: {name!r}")
    return path
