"""The AscendC target: fused NPU kernels from the Kernel IR, with tiling, an op project
for the CANN toolchain, and a CPU emulation that runs the generated kernels.

`mdsl.emit(g, target="ascendc", out_dir=..., symbols=...)` writes the op project (this
package registers `emit_files` with `mdsl.runtime.emit`); `emit_ascendc` /
`build_project` take the AscendC options (`soc=`, `tile_length=`, `strict=`);
`Emulator(project).run(feeds)` compiles the project against the emulation header with the
host C++ compiler and runs it, for checking against `mdsl.interpret`.

>>> import mdsl
>>> with mdsl.Graph("scale") as g:
...     g.output(g.input("x", (8, 100), "float16") * 0.5, "y")
>>> project = build_project(g, soc="Ascend910B")
>>> [(k.tiling.tile_length, k.tiling.tiles_per_row, k.tiling.block_dim) for k in project.kernels]
[(32, 25, 25)]
>>> sorted(name for name in project.files if name.startswith("op_host"))
['op_host/mdsl_tiling.h', 'op_host/scale_tiling.cpp', 'op_host/scale_tiling.h']
"""

from mdsl.targets.ascendc.emulate import Emulator, run_emulated
from mdsl.targets.ascendc.project import AscendcProject, build_project, emit_ascendc
from mdsl.targets.ascendc.soc import PRESETS, SocSpec
from mdsl.targets.ascendc.tiling import Diagnostic, TilingError


def emit_files(graph) -> dict[str, str]:
    """The project files of an optimized, static-shape graph (`mdsl.emit`'s hook)."""
    return build_project(graph, opt_level=0).files


__all__ = [
    "PRESETS",
    "AscendcProject",
    "Diagnostic",
    "Emulator",
    "SocSpec",
    "TilingError",
    "build_project",
    "emit_ascendc",
    "emit_files",
    "run_emulated",
]
