"""The tiling planner: block count, tile count and tile length of every AscendC kernel.

A kernel's Unified Buffer use is `fixed + bytes_per_element * tile_length` (queues of
BUFFER_NUM=2 buffers per streamed operand, float32 temporaries of the vector program,
masks, reduction scratch). The planner picks the longest tile that fits the SoC's UB,
aligned so every buffer starts and ends on 32 bytes (64 elements when Compare is used: it
works on whole 256-byte repeats), no longer than a row, and short enough that the rows'
tiles spread over all cores. The generated host tiling function (`op_host/mdsl_tiling.h`)
runs the same arithmetic at run time with the device's own UB size and core count.

What the hardware would reject is found here, at compile time, with the kernel and the
graph nodes it computes in the message:

- a requested tile length that is not a multiple of the alignment: repaired (rounded
  down), reported as a "repaired" diagnostic (an error with `strict=True`);
- a requested tile length over the UB budget: shrunk to the largest that fits
  ("repaired"; an error with `strict=True`);
- a kernel whose smallest tile does not fit the UB, and dtypes the vector or cube unit
  lacks: errors (`TilingError`, a `CompileError`).

>>> plan = plan_rows("k0_add", rows=1, row_length=1000, resources=Resources(12, 0, 8, True),
...                 soc=SocSpec.named("Ascend910B3", vector_cores=4))
>>> plan.tile_length, plan.tiles_per_row, plan.tail_length, plan.block_dim
(256, 4, 232, 4)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mdsl.ir.errors import CompileError
from mdsl.targets.ascendc.soc import SocSpec

BUFFER_NUM = 2  # double buffering: every queue holds two tiles
UB_ALIGN = 32  # bytes: UB buffers start and DataCopy moves whole 32-byte blocks
COMPARE_ALIGN = 256  # bytes: Compare/Select work on whole 256-byte repeats


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A finding of the planner about one kernel: level is "repaired", "rejected" or
    "fallback" (the kernel runs on the host)."""

    level: str
    kernel: str
    nodes: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        where = "; ".join(self.nodes) if self.nodes else "no graph nodes"
        return f"{self.level}: kernel {self.kernel} ({where}): {self.message}"


class TilingError(CompileError):
    """The AscendC planner rejected one or more kernels; `diagnostics` lists them."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = list(diagnostics)
        lines = "\n  ".join(str(d) for d in self.diagnostics)
        super().__init__(
            f"the AscendC target cannot generate {len(diagnostics)} kernel(s):\n  {lines}"
        )

    def with_context(self, **_) -> TilingError:
        return self


@dataclass(frozen=True, slots=True)
class Resources:
    """UB use of a kernel: `fixed_bytes + bytes_per_element * tile`; tiles are multiples
    of `align` elements; `split_rows`: one row may be spread over several cores."""

    bytes_per_element: int
    fixed_bytes: int
    align: int
    split_rows: bool


@dataclass(slots=True)
class RowTiling:
    """How a kernel's rows are cut into tiles and spread over blocks (cores)."""

    rows: int
    row_length: int
    tile_length: int
    tiles_per_row: int
    tail_length: int
    units: int  # work items: (row, tile) pairs, or rows for row kernels
    block_dim: int
    units_per_block: int
    units_remainder: int  # the first `units_remainder` blocks take one unit more
    ub_bytes: int  # the kernel's UB use at this tile length
    notes: list[Diagnostic] = field(default_factory=list)

    def fields(self) -> dict[str, int]:
        """The values the tiling struct carries (names as in the generated C++)."""
        return {
            "rows": self.rows,
            "rowLength": self.row_length,
            "tileLength": self.tile_length,
            "tilesPerRow": self.tiles_per_row,
            "tailLength": self.tail_length,
            "units": self.units,
            "blockDim": self.block_dim,
            "unitsPerBlock": self.units_per_block,
            "unitsRemainder": self.units_remainder,
        }


def align_down(x: int, a: int) -> int:
    return x // a * a


def align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def plan_rows(
    kernel: str,
    *,
    rows: int,
    row_length: int,
    resources: Resources,
    soc: SocSpec,
    nodes: tuple[str, ...] = (),
    tile_length: int | None = None,
    strict: bool = False,
    cores: int | None = None,
) -> RowTiling:
    """Tile `rows` rows of `row_length` elements for a kernel using `resources`.

    `tile_length` forces a tile (repaired when misaligned or too big; rejected instead
    with `strict`). Raises TilingError when not even the smallest tile fits the UB.
    """
    cores = cores or soc.vector_cores
    a, bpe, fixed = resources.align, resources.bytes_per_element, resources.fixed_bytes
    notes: list[Diagnostic] = []
    max_tile = align_down(max(soc.ub_bytes - fixed, 0) // max(bpe, 1), a)
    if max_tile < a:
        need = fixed + bpe * a
        raise TilingError(
            [
                Diagnostic(
                    "rejected",
                    kernel,
                    nodes,
                    f"even the smallest tile ({a} elements) needs {need} bytes of Unified "
                    f"Buffer, over the {soc.ub_bytes}-byte UB of {soc.name} "
                    f"({bpe} bytes per element + {fixed} fixed); split the fused group or "
                    "use a SoC with a larger UB",
                )
            ]
        )
    if tile_length is None:
        tile = min(max_tile, align_up(max(row_length, 1), a))
        if resources.split_rows and rows < cores:
            per_core = -(-row_length // -(-cores // max(rows, 1)))
            tile = min(tile, max(a, align_up(per_core, a)))
    else:
        tile = _forced_tile(kernel, nodes, tile_length, a, max_tile, bpe, fixed, soc, strict, notes)
    return _spread(rows, row_length, tile, resources, cores, fixed, bpe, notes)


def _forced_tile(kernel, nodes, requested, a, max_tile, bpe, fixed, soc, strict, notes) -> int:
    tile = requested
    if tile % a:
        aligned = max(a, align_down(tile, a))
        why = (
            "and Compare needs whole 256-byte repeats" if a * 4 >= COMPARE_ALIGN else "for DataCopy"
        )
        problem = (
            f"tile_length {tile} is not a multiple of {a} elements (UB buffers must start and "
            f"end on 32-byte boundaries {why})"
        )
        _repair_or_reject(kernel, nodes, problem, aligned, strict, notes)
        tile = aligned
    if tile > max_tile:
        problem = (
            f"tile_length {tile} needs {fixed + bpe * tile} bytes of Unified Buffer, over the "
            f"{soc.ub_bytes}-byte UB of {soc.name}"
        )
        _repair_or_reject(kernel, nodes, problem, max_tile, strict, notes)
        tile = max_tile
    return tile


def _repair_or_reject(kernel, nodes, problem: str, fixed_tile: int, strict: bool, notes) -> None:
    if strict:
        message = f"{problem}; the nearest tile length the hardware takes is {fixed_tile}"
        raise TilingError([Diagnostic("rejected", kernel, nodes, message)])
    notes.append(Diagnostic("repaired", kernel, nodes, f"{problem}; using {fixed_tile}"))


def _spread(rows, row_length, tile, resources, cores, fixed, bpe, notes) -> RowTiling:
    tiles_per_row = max(1, -(-row_length // tile))
    tail = row_length - (tiles_per_row - 1) * tile
    units = rows * tiles_per_row if resources.split_rows else rows
    block_dim = max(1, min(cores, units))
    return RowTiling(
        rows,
        row_length,
        tile,
        tiles_per_row,
        tail,
        units,
        block_dim,
        units // block_dim,
        units % block_dim,
        fixed + bpe * tile,
        notes,
    )


@dataclass(slots=True)
class UnitTiling:
    """Whole work units (no tiles) spread over blocks: im2col rows, matmul blocks."""

    units: int
    block_dim: int
    units_per_block: int
    units_remainder: int

    @staticmethod
    def spread(units: int, cores: int) -> UnitTiling:
        block_dim = max(1, min(cores, units))
        return UnitTiling(units, block_dim, units // block_dim, units % block_dim)


# re-exported for the doctest and callers building SocSpecs
__all__ = [
    "BUFFER_NUM",
    "Diagnostic",
    "Resources",
    "RowTiling",
    "SocSpec",
    "TilingError",
    "UnitTiling",
    "plan_rows",
]
