"""Concat without copies: its inputs written straight into their places in its output.

A Concat is lowered to one copy kernel per input (`lower._concat_part`, rewritten for
kept layouts by `mdsl.codegen.blocked`). Where such a copy moves its whole input, one
contiguous run, into one contiguous run of the output, the input needs no buffer of its
own: it becomes a `View` of that run, the kernels that produce it write into the
Concat's output, and the copy is dropped (oneDNN's in-place concat; XLA's and TVM's
buffer assignment). That is the case when the dims before the Concat's axis multiply to
1: a batch-1 channel Concat in NCHW, or in nChw16c when every input's channels fill
whole blocks; in channels last, or at batch 2, each input is spread over the output and
is copied. In a chain of Concats, each of the previous one and a new feature
(DenseNet's), every one lies at the start of the next.

A copy is dropped when (`drop_concat_copies`):
- its input is an arena buffer (a graph input, constant or output lives elsewhere) of
  exactly the bytes it copies (a blocked buffer with padding channels is larger); its
  output an arena or graph-output buffer; the run starts 64-byte aligned, as every arena
  buffer does (kernels may assume it);
- the input is placed once: fed twice, or to two Concats, it is copied where it is not
  placed (Concats are taken last first: a DenseNet feature goes where the block ends);
- every kernel that writes the input or the output runs before every kernel that reads
  it, and none both reads and writes it (a oneDNN convolution computing in its
  residual's buffer, `kir.Conv.dst_in_residual`, would overwrite the Concat's bytes).

Views are not arena buffers: the memory planner never lets a result take over their
bytes in place (a ReLU after a Concat input), nor an output holding views (`roots`).
The caller gives a root the lifetime of all of its views together. Plans with control
flow, and copies of symbolic sizes, keep their copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mdsl.codegen import kir
from mdsl.codegen.access import contiguous_strides
from mdsl.codegen.memory import ALIGNMENT
from mdsl.expr import same, var


@dataclass(frozen=True, slots=True)
class View:
    """A buffer that is bytes [offset, offset + its size) of buffer `root`: an input of
    Concat `concat` that its producers write into the Concat's output."""

    root: str
    offset: int
    concat: str


def drop_concat_copies(plan, buffers: Callable[[object], tuple[set[str], set[str]]]) -> None:
    """Make the inputs of `plan`'s Concat copies that qualify (module doc) views of their
    outputs (`plan.views`, buffer kind "view") and drop those copies; `buffers(k)` is
    (the buffers kernel `k` reads, those it writes)."""
    if plan.has_control_flow:
        return
    defined = _defined_before_read(plan.kernels, buffers)
    views: dict[str, View] = {}
    dropped: set[int] = set()
    for k in reversed(plan.kernels):
        run = _copied_run(k, plan)
        if run is None:
            continue
        src, dst, offset = run
        if src in views or not (defined(src) and defined(dst)):
            continue
        views[src] = View(dst, offset, k.nodes[0].name)
        dropped.add(id(k))
    if not views:
        return
    for name in views:
        plan.buffers[name].kind = "view"
    plan.views = {name: _resolved(name, views) for name in views}
    plan.kernels = [k for k in plan.kernels if id(k) not in dropped]


def roots(plan) -> set[str]:
    """The buffers holding views of `plan`."""
    return {v.root for v in plan.views.values()}


def in_place_note(plan) -> str:
    """One line for profiles: how many Concat inputs are written in place, or ""."""
    if not plan.views:
        return ""
    concats = len({v.concat for v in plan.views.values()})
    return (
        f"{len(plan.views)} inputs of {concats} Concats written straight into their "
        "outputs (no copy kernels)"
    )


def _copied_run(k, plan) -> tuple[str, str, int] | None:
    """(input, output, byte offset) when `k` is a Concat's copy of a whole arena buffer
    into one contiguous, aligned run of an arena or graph-output buffer; else None."""
    if not isinstance(k, kir.Pointwise) or len(k.nodes) != 1 or k.nodes[0].op_type != "Concat":
        return None
    if k.lets or list(k.loads) != ["src"] or len(k.stores) != 1:
        return None
    load, store = k.loads["src"], k.stores[0]
    if not same(store.value, var("src")):
        return None
    shape = tuple(k.shape)
    if not all(isinstance(d, int) for d in shape) or load.dtype != store.access.dtype:
        return None
    if not (_dense(shape, load.strides) and _dense(shape, store.access.strides)):
        return None
    src, dst = plan.buffers[load.buffer], plan.buffers[store.access.buffer]
    if src.kind != "arena" or dst.kind not in ("arena", "output") or load.buffer == dst.name:
        return None
    if load.offset != 0 or src.elements != math.prod(shape):
        return None
    if not isinstance(store.access.offset, int):
        return None
    offset = store.access.offset * store.access.dtype.itemsize
    if offset % ALIGNMENT:
        return None
    return load.buffer, store.access.buffer, offset


def _dense(shape: tuple[int, ...], strides: tuple) -> bool:
    """Whether `strides` walk `shape` as one contiguous row-major run (dims of size 1
    may have any stride)."""
    row_major = contiguous_strides(shape)
    return all(s == r for size, s, r in zip(shape, strides, row_major) if size != 1)


def _defined_before_read(kernels: list, buffers) -> Callable[[str], bool]:
    """A test of a buffer: at least one kernel writes it, and every kernel writing it
    runs before every kernel reading it (so none both reads and writes it)."""
    first_read: dict[str, int] = {}
    last_write: dict[str, int] = {}
    for step, k in enumerate(kernels):
        reads, writes = buffers(k)
        for b in reads:
            first_read.setdefault(b, step)
        for b in writes:
            last_write[b] = step

    def defined(b: str) -> bool:
        return b in last_write and last_write[b] < first_read.get(b, len(kernels))

    return defined


def _resolved(name: str, views: dict[str, View]) -> View:
    """`views[name]` placed in the buffer at the end of its chain of views (a Concat
    input of a Concat that is itself an input of a later one)."""
    view = views[name]
    root, offset = view.root, view.offset
    while root in views:
        root, offset = views[root].root, offset + views[root].offset
    return View(root, offset, view.concat)
