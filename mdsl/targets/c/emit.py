"""The "c" target's emitted folder: the translation unit `backend="c"` builds, a
Makefile, a README (entry point, buffers, kernels -> nodes), the constants and, when
the graph calls one, the custom C op header."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mdsl.codegen import kir
from mdsl.codegen.half_gemm import half_matmuls_in_float32
from mdsl.codegen.plan import build_plan
from mdsl.codegen.readme import arena_text, buffer_and_kernel_tables, constant_files, md_cell
from mdsl.codegen.toolchain import DEFAULT_FLAGS, blas_paths
from mdsl.ir.errors import MdslError
from mdsl.ir.graph import Graph
from mdsl.ir.naming import file_stem
from mdsl.targets.c.conv import onednn_link_args
from mdsl.targets.c.custom import HEADER_FILE, custom_calls, header_text, link_args
from mdsl.targets.c.render import render_c


def emit_files(graph: Graph) -> dict[str, str | bytes]:
    """The "c" target's files for a static-shape, optimized graph."""
    plan = build_plan(half_matmuls_in_float32(graph), c_bindings=True, indexed=True)
    stem = file_stem(graph.name)
    files: dict[str, str | bytes] = {f"{stem}.c": render_c(plan)}
    command = _compile_command(plan, stem)
    files["Makefile"] = _makefile(stem, command)
    files["README.md"] = _readme(plan, stem, command)
    if custom_calls(plan):
        files[HEADER_FILE] = header_text()
    files.update(constant_files(plan))
    return files


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
    includes, libs = (), ()
    if any(isinstance(k, (kir.Gemm, kir.Conv)) for k in plan.kernels):
        try:
            includes, libs = blas_paths()
        except MdslError:
            libs = ("-lopenblas",)  # scipy-openblas32 missing: name a system BLAS
    flags = (*DEFAULT_FLAGS, "-march=native")
    return _Command(
        "cc", flags, tuple(includes), tuple(libs), link_args(plan) + onednn_link_args(plan)
    )


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
        f"# Generated C for graph `{md_cell(plan.graph.name)}`",
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
        f"`arena`: {arena_text(plan)}. A nonzero result is the failing kernel's position in "
        "the table below, from 1.",
    ]
    return "\n".join(lines + buffer_and_kernel_tables(plan)) + "\n"
