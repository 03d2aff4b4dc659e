"""The "c" target's registry entry: builds through `mdsl.targets.c.backend`, emits
through `mdsl.targets.c.emit` (both imported on first use)."""

from __future__ import annotations

from pathlib import Path


class CTarget:
    """C compiled by the system compiler and loaded with cffi (`backend="c"`)."""

    name = "c"
    symbolic = True  # one build serves every shape signature
    fuses = True
    fallback = "numba"  # what `mdsl.compile` uses on a machine without a C compiler

    def __init__(self, march_native: bool = True):
        from mdsl.codegen.toolchain import default_toolchain

        self.toolchain = default_toolchain(march_native)

    @staticmethod
    def unavailable() -> str | None:
        from mdsl.codegen.toolchain import find_compiler

        return None if find_compiler() else "no C compiler found (set $CC or install gcc)"

    def build(self, graph, symbols: dict[str, int], threads: int | None):
        from mdsl.targets.c.backend import build_variant

        return build_variant(graph, symbols, threads, self.toolchain)

    @staticmethod
    def system_library(soname: str) -> tuple[Path | None, str]:
        """Where this machine has the library `soname` a saved variant links (what
        `CVariant.system_libraries` names), or None; and how to get it."""
        from mdsl.codegen import onednn

        if soname == onednn.SONAME:
            hint = "pip install onednn-cpu-gomp (unset MDSL_ONEDNN=0 if it is set)"
            return onednn.library_path(), hint
        return None, "a library this mdsl does not know"

    @staticmethod
    def load_variant(graph, symbols: dict[str, int], sources: dict[str, str], library, threads):
        """The variant of a saved executable (`mdsl.load_executable`): its library at path
        `library`, checked to be what this mdsl generates for the graph."""
        from mdsl.codegen.toolchain import build_record, elf_problem
        from mdsl.ir.errors import CompileError
        from mdsl.targets.c.backend import CVariant, plan_variant, render_units

        plan = plan_variant(graph, symbols)
        source = render_units(plan)
        signature = f" for {symbols}" if symbols else ""
        if list(sources.values()) != list(source.values()):
            raise CompileError(
                f"the saved C source{signature} differs from what this mdsl generates for the "
                "saved graph (another mdsl version, or custom op bindings registered "
                "differently); register the same bindings, or compile the graph again"
            )
        if build_record(source) not in Path(library).read_bytes():  # checked before dlopen
            raise CompileError(
                f"the saved library{signature} was not built from this graph's source (its "
                "build record names another); refusing to load it"
            )
        problem = elf_problem(Path(library))
        if problem is not None:
            raise CompileError(f"the saved library{signature} is {problem}")
        return CVariant(plan, sources, library, threads)

    @staticmethod
    def emit_files(graph) -> dict[str, str | bytes]:
        from mdsl.targets.c.emit import emit_files

        return emit_files(graph)
