"""The AscendC target: fused NPU kernels from the Kernel IR, with tiling, an op project
for the CANN toolchain, and a CPU emulation that runs the generated kernels.

`mdsl.emit(g, target="ascendc", out_dir=..., symbols=...)` writes the kernel-launch
project of the graph, `project="custom_op"` a CANN custom-operator package of the one op
it computes (`build_op_package`; docs/ascendc-cann.md); this package registers
`emit_files` with `mdsl.runtime.emit`. `emit_ascendc` /
`build_project` take the AscendC options (`soc=`, `tile_length=`, `strict=`);
`Emulator(project).run(feeds)` compiles the project against the emulation header with the
host C++ compiler and runs it, for checking against `mdsl.interpret`.

>>> import mdsl
>>> with mdsl.Graph("scale") as g:
...     g.output(g.input("x", (8, 100), "float16") * 0.5, "y")
>>> project = build_project(g, soc="Ascend910B3")
>>> [(k.tiling.tile_length, k.tiling.tiles_per_row, k.tiling.block_dim) for k in project.kernels]
[(32, 25, 25)]
>>> sorted(name for name in project.files if name.startswith("op_host"))
['op_host/mdsl_tiling.h', 'op_host/scale_tiling.cpp', 'op_host/scale_tiling.h']
"""

from mdsl.ir.errors import CompileError
from mdsl.targets.ascendc.emulate import Emulator, run_emulated
from mdsl.targets.ascendc.op_package import build_op_package
from mdsl.targets.ascendc.project import AscendcProject, build_project, emit_ascendc
from mdsl.targets.ascendc.soc import PRESETS, SocSpec
from mdsl.targets.ascendc.tiling import Diagnostic, TilingError

PROJECTS = ("kernel_launch", "custom_op")


def emit_files(graph, *, project: str = "kernel_launch", soc=None, socs=None, **package):
    """The files of an optimized, static-shape graph (`mdsl.emit`'s hook).

    project="kernel_launch": the graph's kernels with host tiling, a runner and CMake for
    CANN's kernel-launch build, for `soc` (default Ascend910B3). project="custom_op": the
    custom-operator package of the op the graph computes (`build_op_package`: `socs`,
    `op_type`, `infer_shape`, `feeds`).
    """
    if project == "kernel_launch":
        if package or socs is not None:
            raise CompileError(
                f"project='kernel_launch' takes soc=, not {sorted([*package, *(['socs'] if socs else [])])}"
            )
        return build_project(graph, opt_level=0, soc=soc or "Ascend910B3").files
    if project == "custom_op":
        chosen = socs if socs is not None else ([soc] if soc is not None else ["Ascend910B3"])
        return build_op_package(graph, socs=tuple(chosen), **package)
    raise CompileError(f"unknown AscendC project {project!r}; choose one of {', '.join(PROJECTS)}")


__all__ = [
    "PRESETS",
    "AscendcProject",
    "Diagnostic",
    "Emulator",
    "SocSpec",
    "TilingError",
    "build_op_package",
    "build_project",
    "emit_ascendc",
    "emit_files",
    "run_emulated",
]
