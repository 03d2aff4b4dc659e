"""Memory planning: place every intermediate buffer at an offset of one arena.

Input is a list of buffers with byte sizes and lifetimes over the schedule (the step that
defines each and the last step that reads it), plus optional in-place pairs (an output
that may take over a dying input's storage). Two buffers may share bytes only when their
lifetimes do not overlap.

Placement tries three orders and keeps the smaller arena, as XLA's heap simulator does:
  - global decreasing size, best fit: big buffers first, each into the smallest gap left
    between the already placed buffers it overlaps in time; equal sizes longest-lived
    first, and again latest-dying first (repeated encoder layers fill one arena without
    a hole only in one of the two: BERT-base is 7/6 of its lower bound in the other);
  - definition order, best fit: the order a naive allocator would see.
An order whose arena is the lower bound (below) ends the search: none can beat it.

The plan reports `naive_bytes` (every buffer its own bytes), `lower_bound_bytes` (the
peak of live bytes over the schedule: no placement can beat it) and `arena_bytes`.

>>> plan = plan_memory([Buffer("a", 100, 0, 1), Buffer("b", 100, 1, 2), Buffer("c", 100, 2, 3)])
>>> plan.arena_bytes, plan.naive_bytes, plan.lower_bound_bytes
(256, 384, 256)
>>> plan.offsets["a"] == plan.offsets["c"]
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mdsl.ir.errors import CompileError

ALIGNMENT = 64


@dataclass(frozen=True, slots=True)
class Buffer:
    """A buffer of `size` bytes, written at step `start`, last read at step `end`."""

    name: str
    size: int
    start: int
    end: int


@dataclass(slots=True)
class MemoryPlan:
    offsets: dict[str, int]
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    alignment: int = ALIGNMENT
    aliases: dict[str, str] = field(default_factory=dict)  # buffer -> buffer it reuses in place

    def summary(self) -> str:
        ratio = self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0
        return (
            f"arena {self.arena_bytes:,} B (naive {self.naive_bytes:,} B, "
            f"lower bound {self.lower_bound_bytes:,} B, {ratio:.2f}x of it)"
        )


def aligned(size: int, alignment: int = ALIGNMENT) -> int:
    return -(-size // alignment) * alignment


def plan_memory(
    buffers: list[Buffer], alignment: int = ALIGNMENT, inplace: dict[str, str] | None = None
) -> MemoryPlan:
    """Assign arena offsets to `buffers`; `inplace` maps an output buffer to the input
    buffer whose storage it may reuse (legal only if the input's lifetime ends where the
    output's begins and the output is no larger)."""
    by_name = {b.name: b for b in buffers}
    if len(by_name) != len(buffers):
        raise CompileError("memory plan: duplicate buffer names")
    for b in buffers:
        if b.size < 0 or b.end < b.start:
            raise CompileError(
                f"memory plan: buffer {b.name} has size {b.size}, life {b.start}..{b.end}"
            )
    aliases = _legal_aliases(by_name, inplace or {})
    merged = _merge_aliases(buffers, aliases, alignment)
    naive = sum(aligned(b.size, alignment) for b in buffers)
    lower = _peak_live_bytes(merged)
    best = None
    for order in (_by_size, _by_size_then_end, _by_start):
        offsets, arena = _place(sorted(merged, key=order))
        if best is None or arena < best[1]:
            best = (offsets, arena)
        if arena == lower:  # no order can do better (BERT-base: the first one, at every size)
            break
    offsets, arena = best
    for out, inp in aliases.items():
        offsets[out] = offsets[_root(inp, aliases)]
    return MemoryPlan(offsets, arena, naive, lower, alignment, aliases)


def _legal_aliases(by_name: dict, inplace: dict) -> dict[str, str]:
    legal = {}
    taken = set()
    for out, inp in inplace.items():
        o, i = by_name.get(out), by_name.get(inp)
        if o is None or i is None or inp in taken:
            continue
        if i.end == o.start and o.size <= i.size:
            legal[out] = inp
            taken.add(inp)
    return legal


def _root(name: str, aliases: dict) -> str:
    while name in aliases:
        name = aliases[name]
    return name


def _merge_aliases(buffers, aliases, alignment) -> list[Buffer]:
    """Fold in-place chains into one buffer spanning their joint lifetime."""
    groups: dict[str, list[Buffer]] = {}
    for b in buffers:
        groups.setdefault(_root(b.name, aliases), []).append(b)
    return [
        Buffer(
            root,
            aligned(max(m.size for m in members), alignment),
            min(m.start for m in members),
            max(m.end for m in members),
        )
        for root, members in groups.items()
    ]


def _by_size(b: Buffer):
    return (-b.size, -(b.end - b.start), b.start, b.name)


def _by_size_then_end(b: Buffer):
    return (-b.size, -b.end, b.start, b.name)


def _by_start(b: Buffer):
    return (b.start, -b.size, b.name)


def _place(order: list[Buffer]) -> tuple[dict[str, int], int]:
    """Best-fit placement in `order`, each buffer beside those placed before it whose
    lifetimes overlap its own (found with arrays: BERT-base has ~1,300 buffers)."""
    n = len(order)
    starts = np.fromiter((b.start for b in order), np.int64, n)
    ends = np.fromiter((b.end for b in order), np.int64, n)
    sizes = np.fromiter((b.size for b in order), np.int64, n)
    offsets_at = np.zeros(n, np.int64)
    offsets: dict[str, int] = {}
    arena = 0
    for i, b in enumerate(order):
        live = np.flatnonzero((starts[:i] <= b.end) & (ends[:i] >= b.start))
        lo = offsets_at[live]
        busy = sorted(zip(lo.tolist(), (lo + sizes[live]).tolist()))
        offset = _best_gap(busy, b.size)
        offsets[b.name] = offsets_at[i] = offset
        arena = max(arena, offset + b.size)
    return offsets, arena


def _best_gap(busy: list[tuple[int, int]], size: int) -> int:
    """The start of the smallest free gap of at least `size` bytes (or the end)."""
    best_offset, best_waste = None, None
    cursor = 0
    for lo, hi in busy:
        gap = lo - cursor
        if gap >= size and (best_waste is None or gap - size < best_waste):
            best_offset, best_waste = cursor, gap - size
        cursor = max(cursor, hi)
    return cursor if best_offset is None else best_offset


def _peak_live_bytes(buffers: list[Buffer]) -> int:
    events: dict[int, int] = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + b.size
        events[b.end + 1] = events.get(b.end + 1, 0) - b.size
    live = peak = 0
    for step in sorted(events):
        live += events[step]
        peak = max(peak, live)
    return peak
