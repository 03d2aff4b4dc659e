"""The "numba" target's emitted folder: the module `backend="numba"` loads (numba kernels
and a `run` driver), a README (entry point, buffers, kernels -> nodes) and the constants."""

from __future__ import annotations

from mdsl.codegen.plan import build_plan
from mdsl.codegen.readme import arena_text, buffer_and_kernel_tables, constant_files, md_cell
from mdsl.ir.graph import Graph
from mdsl.ir.naming import file_stem
from mdsl.targets.numba.render import render_numba


def emit_files(graph: Graph) -> dict[str, str | bytes]:
    """The "numba" target's files for a static-shape, optimized graph."""
    plan = build_plan(graph)
    stem = file_stem(graph.name)
    files: dict[str, str | bytes] = {f"{stem}.py": render_numba(plan)}
    lines = [
        f"# Generated numba code for graph `{md_cell(graph.name)}`",
        "",
        'Written by `mdsl.emit(g, target="numba")`; `mdsl.compile(g, backend="numba")` '
        "loads the same module. Its kernels compile on first call; `run` drives them:",
        "",
        f"    from {stem} import run",
        "    run(inputs, outputs, consts, arena, callback)  # flat arrays in slot order",
        "",
        f"`arena`: a uint8 array of {arena_text(plan)}.",
    ]
    files["README.md"] = "\n".join(lines + buffer_and_kernel_tables(plan)) + "\n"
    files.update(constant_files(plan))
    return files
