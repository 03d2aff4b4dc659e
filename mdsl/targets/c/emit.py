"""The "c" target's emitted folder: the translation unit `backend="c"` builds, a
Makefile, a README (entry point, buffers, kernels -> nodes), the constants and, when
the graph calls one, the custom C op header."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mdsl.codegen import kir, onednn
from mdsl.codegen.half_gemm import half_matmuls_in_float32
from mdsl.codegen.plan import build_plan
from mdsl.codegen.readme import arena_text, buffer_and_kernel_tables, constant_files, md_cell
from mdsl.codegen.toolchain import DEFAULT_FLAGS, blas_paths, native_flags
from mdsl.ir.errors import MdslError
from mdsl.ir.graph import Graph
from mdsl.ir.naming import file_stem
from mdsl.targets.c.conv import uses_onednn
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
    onednn: bool  # a convolution runs on oneDNN: link libdnnl, found where the build runs

    def line(self, stem: str) -> str:
        """One shell command building the library on a machine like this one."""
        flags = [*self.flags, *(f for f in native_flags() if f not in self.flags)]
        words = [self.cc, *flags, *(f"-I{d}" for d in self.includes)]
        words = [*words, f"{stem}.c", "-o", f"{stem}.so", *self.libs, *self.custom]
        line = shlex.join(words)
        if self.onednn:
            line += f' -L"$DNNL_DIR" -l:{onednn.SONAME} -Wl,-rpath,"$DNNL_DIR"'
        return line + " -lm"


def _compile_command(plan, stem: str) -> _Command:
    includes, libs = (), ()
    if any(isinstance(k, (kir.Gemm, kir.Conv)) for k in plan.kernels):
        try:
            includes, libs = blas_paths()
        except MdslError:
            libs = ("-lopenblas",)  # scipy-openblas32 missing: name a system BLAS
    flags = (*DEFAULT_FLAGS, "-march=native")
    return _Command("cc", flags, tuple(includes), tuple(libs), link_args(plan), uses_onednn(plan))


def _makefile(stem: str, c: _Command) -> str:
    def words(items):
        return " ".join(shlex.quote(x) for x in items)

    onednn_lines, onednn_libs = "", ""
    if c.onednn:  # the folder of libdnnl, looked up as mdsl's runtime does, when make runs
        onednn_lines = f"""
# Convolutions run on oneDNN ({onednn.SONAME}, the onednn-cpu-gomp wheel): its folder is
# found as mdsl finds it (the Python environment's lib folder, then LD_LIBRARY_PATH);
# or give it: make DNNL_DIR=/folder/holding/{onednn.SONAME}
PYTHON ?= python3
DNNL_DIR ?= $(shell $(PYTHON) -c "{onednn.FIND_DIR_PYTHON}")
DNNL_LIBS ?= -L$(DNNL_DIR) -l:{onednn.SONAME} -Wl,-rpath,$(DNNL_DIR)
"""
        onednn_libs = " $(DNNL_LIBS)"
    check = (
        f"\t$(if $(DNNL_DIR),,$(error {onednn.SONAME} not found: pip install onednn-cpu-gomp, "
        "or make DNNL_DIR=<its folder>))\n"
        if c.onednn
        else ""
    )
    return f"""# Builds {stem}.so from the code mdsl generated (mdsl.emit(target="c")).
CC ?= {c.cc}
CFLAGS ?= {words(c.flags)}
# loops in 512-bit vectors on x86 CPUs that have them (GCC's default there is 256-bit)
ifeq ($(shell uname -m),x86_64)
VECTOR_FLAGS ?= -mprefer-vector-width=512
endif
BLAS_CFLAGS ?= {words(f"-I{d}" for d in c.includes)}
BLAS_LIBS ?= {words(c.libs)}
CUSTOM_LIBS ?= {words(c.custom)}
{onednn_lines}
{stem}.so: {stem}.c
{check}\t$(CC) $(CFLAGS) $(VECTOR_FLAGS) $(BLAS_CFLAGS) {stem}.c \\
\t\t-o {stem}.so $(BLAS_LIBS) $(CUSTOM_LIBS){onednn_libs} -lm

clean:
\trm -f {stem}.so

.PHONY: clean
"""


def _readme(plan, stem: str, command: _Command) -> str:
    lines = [
        f"# Generated C for graph `{md_cell(plan.graph.name)}`",
        "",
        'Written by `mdsl.emit(g, target="c")`; `mdsl.compile(g, backend="c")` builds the '
        "same code (a graph with many kernels, as several translation units).",
        "",
        "## Build",
        "",
        "    make",
        "",
        "or",
        "",
        f"    {command.line(stem)}",
        "",
        *(_ONEDNN_README if command.onednn else []),
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


_ONEDNN_README = [
    f"where `DNNL_DIR` is the folder holding `{onednn.SONAME}` (pip's `onednn-cpu-gomp`: "
    "`lib` of the Python environment; `make` finds it itself, as mdsl does). The "
    "convolutions computed by oneDNN need it where the library is loaded, too.",
    "",
]
