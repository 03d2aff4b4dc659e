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

A symbolic plan places its buffers again for every shape signature. `layout_template`
keeps one placement as a template: each buffer at offset 0 or right above the buffer
it was placed above, so `LayoutTemplate.apply` places the same buffers at other sizes
in one pass (BERT-base's 1,000 buffers in about a millisecond, where placing takes
25-30 ms) and checks the result as the planner guarantees it; when the check fails the
caller plans afresh.
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
    return _planned(buffers, alignment, inplace or {})[0]


def _planned(buffers: list[Buffer], alignment: int, inplace: dict[str, str]):
    """(the plan, the buffers merged by in-place chains, the best order as indices into
    them, and per position of that order the index of the buffer it sits on or -1)."""
    by_name = {b.name: b for b in buffers}
    if len(by_name) != len(buffers):
        raise CompileError("memory plan: duplicate buffer names")
    for b in buffers:
        if b.size < 0 or b.end < b.start:
            raise CompileError(
                f"memory plan: buffer {b.name} has size {b.size}, life {b.start}..{b.end}"
            )
    aliases = _legal_aliases(by_name, inplace)
    merged = _merge_aliases(buffers, aliases, alignment)
    naive = sum(aligned(b.size, alignment) for b in buffers)
    lower = _peak_live_bytes(merged)
    best = None
    for key in (_by_size, _by_size_then_end, _by_start):
        order = sorted(range(len(merged)), key=lambda i: key(merged[i]))
        offsets, arena, below = _place([merged[i] for i in order])
        if best is None or arena < best[1]:
            best = (offsets, arena, order, [-1 if j < 0 else order[j] for j in below])
        if arena == lower:  # no order can do better (BERT-base: the first one, at every size)
            break
    offsets, arena, order, below = best
    for out, inp in aliases.items():
        offsets[out] = offsets[_root(inp, aliases)]
    return MemoryPlan(offsets, arena, naive, lower, alignment, aliases), merged, order, below


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


def _place(order: list[Buffer]) -> tuple[dict[str, int], int, list[int]]:
    """Best-fit placement in `order`, each buffer beside those placed before it whose
    lifetimes overlap its own (found with arrays: BERT-base has ~1,300 buffers); also,
    per buffer, the position in `order` of the buffer it sits right above (-1: at 0)."""
    n = len(order)
    starts = np.fromiter((b.start for b in order), np.int64, n)
    ends = np.fromiter((b.end for b in order), np.int64, n)
    sizes = np.fromiter((b.size for b in order), np.int64, n)
    offsets_at = np.zeros(n, np.int64)
    offsets: dict[str, int] = {}
    below = []
    arena = 0
    for i, b in enumerate(order):
        live = np.flatnonzero((starts[:i] <= b.end) & (ends[:i] >= b.start))
        lo = offsets_at[live]
        busy = sorted(zip(lo.tolist(), (lo + sizes[live]).tolist(), live.tolist()))
        offset, under = _best_gap(busy, b.size)
        offsets[b.name] = offsets_at[i] = offset
        below.append(under)
        arena = max(arena, offset + b.size)
    return offsets, arena, below


def _best_gap(busy: list[tuple[int, int, int]], size: int) -> tuple[int, int]:
    """The start of the smallest free gap of at least `size` bytes (or the end) among
    the (start, end, position) of the busy buffers, and the position of the buffer
    whose end it is (-1: 0)."""
    best, best_waste = None, None
    cursor, under = 0, -1
    for lo, hi, position in busy:
        gap = lo - cursor
        if gap >= size and (best_waste is None or gap - size < best_waste):
            best, best_waste = (cursor, under), gap - size
        if hi > cursor:
            cursor, under = hi, position
    return (cursor, under) if best is None else best


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


# -- templates ----------------------------------------------------------------------------
MAX_TEMPLATE_PAIRS = 1 << 22  # buffers live at once, pairwise, that `apply` checks


@dataclass(frozen=True, slots=True, eq=False)  # arrays inside: compared by identity
class LayoutTemplate:
    """A placement of buffers (`layout_template`) to place them again at other sizes.

    Merged buffers (in-place chains) are indexed as the planner merged them; `root_of`
    maps each buffer, in the order `apply` takes sizes, to its merged buffer."""

    names: tuple[str, ...]
    root_of: np.ndarray  # per buffer: its merged buffer
    order: tuple[int, ...]  # merged buffers in the order they were placed
    below: tuple[int, ...]  # per merged buffer of `order`: the one it sits on, or -1
    starts: np.ndarray  # per merged buffer: its lifetime
    ends: np.ndarray
    pairs: np.ndarray  # (2, pairs): merged buffers whose lifetimes overlap
    inplace: tuple[tuple[int, int], ...]  # the candidate pairs (output, input) in order
    aliases: tuple[tuple[int, int], ...]  # those that were legal
    arena_bytes: int
    lower_bound_bytes: int
    alignment: int

    def apply(self, sizes: list[int]) -> MemoryPlan | None:
        """The plan of the buffers at byte `sizes` (in `names` order) placed as the
        template places them, or None when the placement is not one the planner could
        return: a byte shared by two buffers live at once, other in-place pairs legal at
        these sizes, or an arena further above the lower bound than the template's."""
        if self._legal_aliases(sizes) != self.aliases:
            return None
        step = self.alignment
        nbytes = -(-np.array(sizes, np.int64) // step) * step
        merged = np.zeros(len(self.starts), np.int64)
        np.maximum.at(merged, self.root_of, nbytes)
        sized = merged.tolist()
        at = [0] * len(sized)
        for root, under in zip(self.order, self.below):
            if under >= 0:
                at[root] = at[under] + sized[under]
        offsets = np.array(at, np.int64)
        ends = offsets + merged
        first, second = self.pairs
        if not np.all((ends[first] <= offsets[second]) | (ends[second] <= offsets[first])):
            return None
        arena = int(ends.max(initial=0))
        lower = _peak_of(self.starts, self.ends, merged)
        if arena * self.lower_bound_bytes > lower * self.arena_bytes:
            return None
        by_name = {name: at[root] for name, root in zip(self.names, self.root_of.tolist())}
        aliases = {self.names[o]: self.names[i] for o, i in self.aliases}
        return MemoryPlan(by_name, arena, int(nbytes.sum()), lower, step, aliases)

    def _legal_aliases(self, sizes: list[int]) -> tuple[tuple[int, int], ...]:
        """`_legal_aliases` of the candidate pairs whose lifetimes fit, at `sizes`."""
        legal, taken = [], set()
        for out, inp in self.inplace:
            if inp not in taken and sizes[out] <= sizes[inp]:
                legal.append((out, inp))
                taken.add(inp)
        return tuple(legal)


def layout_template(
    buffers: list[Buffer], alignment: int = ALIGNMENT, inplace: dict[str, str] | None = None
) -> LayoutTemplate | None:
    """`plan_memory`'s placement of `buffers` as a template, or None when it would not
    serve (no bytes to place, or too many buffers live at once to check cheaply)."""
    plan, merged, order, below = _planned(buffers, alignment, inplace or {})
    if plan.lower_bound_bytes == 0:
        return None
    starts = np.array([m.start for m in merged], np.int64)
    ends = np.array([m.end for m in merged], np.int64)
    pairs = _overlapping_pairs(starts, ends)
    if pairs is None:
        return None
    index = {b.name: i for i, b in enumerate(buffers)}
    root = {m.name: i for i, m in enumerate(merged)}
    candidates = tuple(
        (index[out], index[inp])
        for out, inp in (inplace or {}).items()
        if out in index and inp in index and buffers[index[inp]].end == buffers[index[out]].start
    )
    return LayoutTemplate(
        names=tuple(b.name for b in buffers),
        root_of=np.array([root[_root(b.name, plan.aliases)] for b in buffers], np.int64),
        order=tuple(order),
        below=tuple(below),
        starts=starts,
        ends=ends,
        pairs=pairs,
        inplace=candidates,
        aliases=tuple((index[o], index[i]) for o, i in plan.aliases.items()),
        arena_bytes=plan.arena_bytes,
        lower_bound_bytes=plan.lower_bound_bytes,
        alignment=alignment,
    )


def _overlapping_pairs(starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """(2, pairs) indices of the buffers whose lifetimes overlap, each pair once; None
    beyond MAX_TEMPLATE_PAIRS. Sorted by start, buffer k overlaps exactly the later
    ones starting at or before its end."""
    by_start = np.argsort(starts, kind="stable")
    s, e = starts[by_start], ends[by_start]
    counts = np.searchsorted(s, e, side="right") - np.arange(1, len(s) + 1)
    total = int(counts.sum())
    if total > MAX_TEMPLATE_PAIRS:
        return None
    first = np.repeat(np.arange(len(s)), counts)
    second = first + 1 + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.stack([by_start[first], by_start[second]])


def _peak_of(starts: np.ndarray, ends: np.ndarray, sizes: np.ndarray) -> int:
    """`_peak_live_bytes` of buffers given as arrays."""
    if not len(sizes):
        return 0
    events = np.zeros(int(ends.max()) + 2, np.int64)
    np.add.at(events, starts, sizes)
    np.add.at(events, ends + 1, -sizes)
    return int(np.cumsum(events).max())
