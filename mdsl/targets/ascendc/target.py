"""The "ascendc" target's registry entry: writes the AscendC op project (`mdsl.emit`)."""

from __future__ import annotations


class AscendcTarget:
    """AscendC op projects for Ascend NPUs, built by the CANN toolchain (emit only: the
    CPU emulation, `mdsl.targets.ascendc.Emulator`, runs them for checking)."""

    name = "ascendc"
    symbolic = False
    fuses = True

    @staticmethod
    def emit_files(graph, **options) -> dict[str, str | bytes]:
        """`project="kernel_launch"` (default) or `"custom_op"`; see `emit_files` there."""
        from mdsl.targets.ascendc import emit_files

        return emit_files(graph, **options)
