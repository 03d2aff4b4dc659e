"""What an AscendC kernel needs from the SoC, read off its streams before rendering.

The planner compares these needs with the SoC's capability table (`soc.py`) and rejects
at emit time what the SoC cannot run, so no project reaches the compiler with an API the
SoC lacks:

- `unaligned_copies`: copies between global memory and the UB that are not whole 32-byte
  blocks (row tails, unaligned row starts, scalar results) need `DataCopyPad`;
- `scatters`: stores with a stride go element by element through the data cache
  (`SetValue`, written back by `DataCacheCleanAndInvalid`); such a kernel runs on one block
  so no two cores store into one 64-byte cache line.

>>> from mdsl.targets.ascendc.kernels import Stream
>>> from mdsl.ir.dtype import DType
>>> _misaligned(Stream("x", "b0", DType.float32, 0, (50,), 1), 50)
'rows of 50 float32 (200 bytes)'
>>> _misaligned(Stream("x", "b0", DType.float32, 0, (64,), 1), 64) is None
True
"""

from __future__ import annotations

from mdsl.targets.ascendc.kernels import (
    Im2colKernel,
    MatmulKernel,
    RowKernel,
    RowStorePhase,
    ScalarStorePhase,
    Stream,
    VectorKernel,
)

BLOCK = 32  # bytes: DataCopy moves whole 32-byte blocks


def _misaligned(s: Stream, row_length: int) -> str | None:
    """Why contiguous copies of stream `s` (rows of `row_length`) are not whole blocks."""
    size = s.dtype.itemsize
    if (row_length * size) % BLOCK:
        return f"rows of {row_length} {s.dtype} ({row_length * size} bytes)"
    starts = [s.offset, *(stride for stride in s.outer)]
    if any((x * size) % BLOCK for x in starts):
        return f"rows of {s.dtype} starting off a 32-byte boundary (offset {s.offset}, strides {s.outer})"
    return None


def _streams(k) -> tuple[list[Stream], list[Stream], list[Stream]]:
    """(loads, row stores, scalar stores) of a vector or row kernel."""
    if isinstance(k, VectorKernel):
        return list(k.loads.values()), [s for s, _ in k.stores], []
    rows = [p.stream for p in k.phases if isinstance(p, RowStorePhase)]
    scalars = [p.stream for p in k.phases if isinstance(p, ScalarStorePhase)]
    return list(k.loads.values()), rows, scalars


def unaligned_copies(k) -> list[str]:
    """What in kernel `k` needs DataCopyPad (empty: whole 32-byte blocks only)."""
    if isinstance(k, MatmulKernel):
        return unaligned_copies(k.epilogue) if k.epilogue is not None else []
    if isinstance(k, Im2colKernel):
        widths = [(k.width, "image rows"), (k.out_hw[1], "column rows")]
        return [f"{what} of {w} float32" for w, what in widths if (w * 4) % BLOCK]
    loads, rows, scalars = _streams(k)
    found = []
    for s in [*loads, *rows]:
        if s.inner == 1:  # contiguous: DataCopy (gathered streams go through GetValue)
            why = _misaligned(s, k.row_length)
            if why and why not in found:
                found.append(why)
    if scalars:
        found.append("one scalar result per row")
    return found


def scatters(k) -> bool:
    """Does kernel `k` store with a stride (element by element through the data cache)?"""
    if isinstance(k, MatmulKernel):
        return k.epilogue is not None and scatters(k.epilogue)
    if isinstance(k, (VectorKernel, RowKernel)):
        _, rows, _ = _streams(k)
        return any(s.inner not in (0, 1) for s in rows)
    return False
