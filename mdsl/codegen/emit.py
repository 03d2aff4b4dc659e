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

Other targets plug in with `register_target(name, render)`, where `render(graph)` takes
the optimized, static-shape graph and returns {relative file name: text or bytes}. A
target named in `_PROVIDERS` ("ascendc") is imported on first use: its module either
calls `register_target` when imported or defines `emit_files(graph)`, registered for it.

>>> import mdsl, tempfile
>>> with mdsl.Graph("axpy") as g:
...     x = g.input("x", ("N",))
...     g.output(x * 2.0 + 1.0, "y")
>>> files = mdsl.emit(g, target="c", out_dir=tempfile.mkdtemp(), symbols={"N": 8})
>>> sorted(p.name for p in files)
['Makefile', 'README.md', 'axpy.c', 'c0.npy', 'c1.npy']
"""

from __future__ import annotations

import importlib
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mdsl.ir.errors import CompileError, MdslError
from mdsl.ir.graph import Graph
from mdsl.ir.naming import file_stem

Render = Callable[[Graph], Mapping[str, "str | bytes"]]


@dataclass(frozen=True, slots=True)
class EmitTarget:
    name: str
    render: Render
    description: str = ""


_TARGETS: dict[str, EmitTarget] = {}
_PROVIDERS = {"ascendc": ("mdsl.targets.ascendc",)}


def register_target(name: str, render: Render, *, description: str = "") -> None:
    """Make `mdsl.emit(g, target=name)` write the files `render(graph)` returns."""
    if not isinstance(name, str) or not name.isidentifier() or not callable(render):
        raise CompileError(f"register_target needs an identifier and a callable, got {name!r}")
    _TARGETS[name] = EmitTarget(name, render, description)


def targets() -> list[str]:
    """Names `emit` accepts (registered, or provided by a module imported on first use)."""
    return sorted(set(_TARGETS) | set(_PROVIDERS))


def emit(
    g: Graph,
    target: str = "c",
    out_dir="build/mdsl",
    *,
    symbols: Mapping[str, int] | None = None,
    opt_level: int = 2,
) -> list[Path]:
    """Write the code `target` generates for `g` into `out_dir`; returns the files written.

    A graph with symbolic dims needs `symbols` (e.g. `{"N": 8}`): code is generated for
    concrete sizes. Existing files of the same names are overwritten; others are kept.
    """
    from mdsl.codegen.specialize import specialize
    from mdsl.passes.manager import optimize

    if not isinstance(g, Graph):
        raise CompileError(f"mdsl.emit takes an mdsl.Graph, got {type(g).__name__}")
    chosen = _target(target)
    values = _checked_symbols(g, symbols)
    optimized = optimize(g, level=opt_level)
    static = specialize(optimized, values) if values else optimized
    files = chosen.render(static)
    return _write(Path(os.fspath(out_dir)), files)


def _target(name: str) -> EmitTarget:
    if name not in _TARGETS and name in _PROVIDERS:
        _import_provider(name)
    found = _TARGETS.get(name)
    if found is None:
        raise CompileError(f"unknown emit target {name!r}; known: {', '.join(targets())}")
    return found


def _import_provider(name: str) -> None:
    for module_name in _PROVIDERS[name]:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            continue
        if name not in _TARGETS and callable(getattr(module, "emit_files", None)):
            register_target(name, module.emit_files)
        if name in _TARGETS:
            return
    raise CompileError(f"emit target {name!r} is not available in this mdsl")


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


# -- the C target ------------------------------------------------------------------------------
def emit_c_files(graph: Graph) -> dict[str, str | bytes]:
    """The "c" target's files for a static-shape, optimized graph."""
    from mdsl.codegen.plan import build_plan
    from mdsl.targets.c.custom import HEADER_FILE, custom_calls, header_text
    from mdsl.targets.c.render import render_c

    plan = build_plan(graph, c_bindings=True)
    stem = file_stem(graph.name)
    files: dict[str, str | bytes] = {f"{stem}.c": render_c(plan)}
    command = _compile_command(plan, stem)
    files["Makefile"] = _makefile(stem, command)
    files["README.md"] = _readme(plan, stem, command)
    if custom_calls(plan):
        files[HEADER_FILE] = header_text()
    for slot, value in enumerate(plan.constants):
        files[f"constants/c{slot}.npy"] = _npy(value)
    return files


def _npy(value: np.ndarray) -> bytes:
    import io

    from mdsl.ir.dtype import DType

    if value.dtype == DType.bfloat16.np:  # .npy cannot name bfloat16: its bits
        value = value.view(np.uint16)
    buf = io.BytesIO()
    np.save(buf, np.asarray(value, order="C"), allow_pickle=False)
    return buf.getvalue()


@dataclass(frozen=True, slots=True)
class _Command:
    cc: str
    flags: tuple[str, ...]
    includes: tuple[str, ...]
    libs: tuple[str, ...]
    custom: tuple[str, ...]

    def line(self, stem: str) -> str:
        words = [self.cc, *self.flags, *(f"-I{d}" for d in self.includes), f"{stem}.c"]
        return shlex.join([*words, "-o", f"{stem}.so", *self.libs, *self.custom, "-lm"])


def _compile_command(plan, stem: str) -> _Command:
    from mdsl.codegen import kir
    from mdsl.codegen.toolchain import DEFAULT_FLAGS, blas_paths
    from mdsl.targets.c.custom import link_args

    includes, libs = (), ()
    if any(isinstance(k, (kir.Gemm, kir.Conv)) for k in plan.kernels):
        try:
            includes, libs = blas_paths()
        except MdslError:
            libs = ("-lopenblas",)  # scipy-openblas32 missing: name a system BLAS
    flags = (*DEFAULT_FLAGS, "-march=native")
    return _Command("cc", flags, tuple(includes), tuple(libs), link_args(plan))


def _makefile(stem: str, c: _Command) -> str:
    def words(items):
        return " ".join(shlex.quote(x) for x in items)

    return f"""# Builds {stem}.so from the code mdsl generated (mdsl.emit(target="c")).
CC ?= {c.cc}
CFLAGS ?= {words(c.flags)}
BLAS_CFLAGS ?= {words(f"-I{d}" for d in c.includes)}
BLAS_LIBS ?= {words(c.libs)}
CUSTOM_LIBS ?= {words(c.custom)}

{stem}.so: {stem}.c
\t$(CC) $(CFLAGS) $(BLAS_CFLAGS) {stem}.c -o {stem}.so $(BLAS_LIBS) $(CUSTOM_LIBS) -lm

clean:
\trm -f {stem}.so

.PHONY: clean
"""


def _readme(plan, stem: str, command: _Command) -> str:
    lines = [
        f"# Generated C for graph `{_md(plan.graph.name)}`",
        "",
        'Written by `mdsl.emit(g, target="c")`; `mdsl.compile(g, backend="c")` builds the '
        "same translation unit.",
        "",
        "## Build",
        "",
        "    make",
        "",
        "or",
        "",
        f"    {command.line(stem)}",
        "",
        "## Entry point",
        "",
        "    int mdsl_run(void *const *inputs, void *const *outputs, const void *const *consts,",
        "                 char *arena, mdsl_callback_t callback);  /* 0 on success */",
        "    void mdsl_set_threads(int n);",
        "",
        f"`arena`: {_arena_text(plan)}. A nonzero result is the failing kernel's position in "
        "the table below, from 1.",
    ]
    return "\n".join(lines + _buffer_and_kernel_tables(plan)) + "\n"


def _arena_text(plan) -> str:
    m = plan.memory
    return (
        f"{m.arena_bytes} bytes, 64-byte aligned (naive {m.naive_bytes}, lower bound "
        f"{m.lower_bound_bytes})"
    )


def _buffer_and_kernel_tables(plan) -> list[str]:
    from mdsl.targets.c.render import _KIND

    lines = ["", "| buffer | tensor | dtype | elements |", "|---|---|---|---|"]
    for spec in plan.buffers.values():
        if spec.kind in ("input", "output", "const"):
            where = f"`{spec.kind}s[{spec.slot}]`"
            lines.append(f"| {where} | `{_md(spec.tensor)}` | {spec.dtype} | {spec.elements} |")
    if plan.constants:
        lines += ["", "`consts[i]` holds `constants/c<i>.npy` (bfloat16 as its uint16 bits)."]
    if plan.callbacks:
        lines += [
            "",
            "Kernels of kind *Python callback* call `callback(index, buffers)`; mdsl's "
            "runtime answers them by running the node's Python binding.",
        ]
    lines += ["", "## Kernels", "", "| # | kernel | kind | nodes |", "|---|---|---|---|"]
    for i, k in enumerate(plan.kernels, 1):
        nodes = ", ".join(f"`{_md(n.name)}`" for n in k.nodes)
        lines.append(f"| {i} | `{k.name}` | {_KIND[type(k)]} | {nodes} |")
    return lines


def _md(text: str) -> str:
    """`text` safe inside a Markdown table cell and code span."""
    text = "".join(c if c.isprintable() else " " for c in text)
    return text.replace("|", "\\|").replace("`", "'")


# -- the numba target --------------------------------------------------------------------------
def emit_numba_files(graph: Graph) -> dict[str, str | bytes]:
    """The "numba" target's files for a static-shape, optimized graph."""
    try:
        from mdsl.targets.numba.render import render_numba
    except ModuleNotFoundError as e:
        raise CompileError(f"emit target 'numba' is not available in this mdsl ({e})") from None
    from mdsl.codegen.plan import build_plan

    plan = build_plan(graph)
    stem = file_stem(graph.name)
    files: dict[str, str | bytes] = {f"{stem}.py": render_numba(plan)}
    lines = [
        f"# Generated numba code for graph `{_md(graph.name)}`",
        "",
        'Written by `mdsl.emit(g, target="numba")`; `mdsl.compile(g, backend="numba")` '
        "loads the same module. Its kernels compile on first call; `run` drives them:",
        "",
        f"    from {stem} import run",
        "    run(inputs, outputs, consts, arena, callback)  # flat arrays in slot order",
        "",
        f"`arena`: a uint8 array of {_arena_text(plan)}.",
    ]
    files["README.md"] = "\n".join(lines + _buffer_and_kernel_tables(plan)) + "\n"
    for slot, value in enumerate(plan.constants):
        files[f"constants/c{slot}.npy"] = _npy(value)
    return files


register_target("c", emit_c_files, description="one C translation unit + Makefile")
register_target("numba", emit_numba_files, description="one Python module of numba kernels")
