"""Concat without copies: its inputs written straight into their places in its output.

A Concat is lowered to one copy kernel per input (`lower._concat_part`, rewritten for
kept layouts by `mdsl.codegen.blocked`). Where such a copy moves its whole input, one
contiguous run, into one contiguous run of the output, the input needs no buffer of its
own: it becomes a `View` of that run, the kernels that produce it write into the
Concat's output, and the copy is dropped (oneDNN's in-place concat; XLA's and TVM's
buffer assignment). That is the case when the dims before the Concat's axis multiply to
1: a batch-1 channel Concat in NCHW, or in nChw16c when every input's channels fill
whole blocks; in channels last, or at batch 2, each input is spread over the output.
In a chain of Concats, each of the previous one and a new feature
(DenseNet's), every one lies at the start of the next.

A channels-last input spread over the output's pixels, at any batch, is written in place
when its one writer is mdsl's Winograd convolution (`mdsl.codegen.winograd`), which
stores each pixel's channels at any pitch (`kir.Conv.out_pixel_stride`), and has few
input channels (`SPREAD_MAX_CIN`): SqueezeNet's 3x3 branches. Other spread inputs are
copied: oneDNN 3.2's convolutions cannot write such a destination (they fall back to
the reference kernel).

A copy is dropped when (`drop_concat_copies`):
- its input is an arena buffer (a graph input, constant or output lives elsewhere) of
  exactly the bytes it copies (a blocked buffer with padding channels is larger); its
  output an arena or graph-output buffer; the run starts 64-byte aligned, as every arena
  buffer does (kernels may assume it);
- the input is placed once: fed twice, or to two Concats, it is copied where it is not
  placed (Concats are taken last first: a DenseNet feature goes where the block ends);
- every kernel that writes the input or the output runs before every kernel that reads
  it, and none both reads and writes it (a oneDNN convolution computing in its
  residual's buffer, `kir.Conv.dst_in_residual`, would overwrite the Concat's bytes);
- spread over the pixels: no kernel but the copy reads the input, and its one writer is
  a Winograd convolution in NHWC of at most SPREAD_MAX_CIN input channels a group, with
  no residual, epilogue, SiLU or source copy.

Views are not arena buffers: the memory planner never lets a result take over their
bytes in place (a ReLU after a Concat input), nor an output holding views (`roots`).
The caller gives a root the lifetime of all of its views together. Plans with control
flow, and copies of symbolic sizes, keep their copies.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from mdsl.codegen import kir
from mdsl.codegen.access import contiguous_strides
from mdsl.codegen.memory import ALIGNMENT
from mdsl.expr import same, var

# Written at the Concat's pitch, a Winograd kernel's stores reach lines further apart
# and took 2-20% longer (Inception v1's, 96-160 input channels: the whole model 1.5%
# slower than with its copies); with few input channels the copy is the larger cost
# (SqueezeNet's fire modules, 16-64: the whole model 1.003 -> 0.965 of ORT, 1 thread,
# two builds of each interleaved). Inception v2's three of at most 64: 0.883 -> 0.876.
SPREAD_MAX_CIN = 64


@dataclass(frozen=True, slots=True)
class View:
    """A buffer that is bytes [offset, offset + its size) of buffer `root` (with a
    `pixel_stride`, each of its pixels' channels that many elements after the last
    pixel's): an input of Concat `concat` that its producers write into its output."""

    root: str
    offset: int
    concat: str
    pixel_stride: int = 0


def drop_concat_copies(plan, buffers: Callable[[object], tuple[set[str], set[str]]]) -> None:
    """Make the inputs of `plan`'s Concat copies that qualify (module doc) views of their
    outputs (`plan.views`, buffer kind "view") and drop those copies; `buffers(k)` is
    (the buffers kernel `k` reads, those it writes)."""
    if plan.has_control_flow:
        return
    defined = _defined_before_read(plan.kernels, buffers)
    writers, readers = buffer_users(plan.kernels, buffers)
    views: dict[str, View] = {}
    dropped: set[int] = set()
    for k in reversed(plan.kernels):
        run = _copied_run(k, plan) or _spread_run(k, plan, writers, readers)
        if run is None or run.src in views or not (defined(run.src) and defined(run.dst)):
            continue
        views[run.src] = View(run.dst, run.offset, k.nodes[0].name, run.pixel_stride)
        if run.writer is not None:
            run.writer.out_pixel_stride = run.pixel_stride
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


@dataclass(frozen=True, slots=True)
class _Run:
    """Where a Concat copy's input `src` lies in its output `dst`: from byte `offset`,
    one run, or its pixels `pixel_stride` elements apart as `writer` stores them."""

    src: str
    dst: str
    offset: int
    pixel_stride: int = 0
    writer: kir.Conv | None = None


def _copied_run(k, plan) -> _Run | None:
    """Where, when `k` is a Concat's copy of a whole arena buffer into one contiguous,
    aligned run of an arena or graph-output buffer; else None."""
    parts = _copy_parts(k, plan)
    if parts is None or not _dense(parts[2], parts[1].access.strides):
        return None
    load, store, _ = parts
    return _Run(load.buffer, store.access.buffer, _aligned_offset(store.access))


def _copy_parts(k, plan) -> tuple[kir.Access, kir.Store, tuple[int, ...]] | None:
    """(load, store, shape) when `k` is a Concat's copy of a whole arena buffer, read in
    order, into an arena or graph-output buffer at a 64-byte aligned offset; else None."""
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
    if not _dense(shape, load.strides):
        return None
    src, dst = plan.buffers[load.buffer], plan.buffers[store.access.buffer]
    if src.kind != "arena" or dst.kind not in ("arena", "output") or load.buffer == dst.name:
        return None
    if load.offset != 0 or src.elements != math.prod(shape):
        return None
    if _aligned_offset(store.access) is None:
        return None
    return load, store, shape


def _aligned_offset(access: kir.Access) -> int | None:
    """`access`'s offset in bytes, if a static multiple of ALIGNMENT."""
    if not isinstance(access.offset, int) or access.offset * access.dtype.itemsize % ALIGNMENT:
        return None
    return access.offset * access.dtype.itemsize


def _spread_run(k, plan, writers, readers) -> _Run | None:
    """Where, when `k` copies a whole arena buffer, written by a Winograd convolution
    only and read by `k` only, into a channels-last output whose pixels lie a fixed
    pitch apart; else None."""
    parts = _copy_parts(k, plan)
    if parts is None:
        return None
    load, store, shape = parts
    written_by = writers.get(load.buffer, [])
    conv = written_by[0] if len(written_by) == 1 else None
    if not (isinstance(conv, kir.Conv) and conv.out == load.buffer and _stores_by_pixel(conv)):
        return None
    if readers.get(load.buffer) != [k] or len(shape) < 2 or store.access.strides[-1] != 1:
        return None
    pitch = store.access.strides[-2]
    by_pixel = contiguous_strides(shape[:-1])
    strides = store.access.strides[:-1]
    if not all(s == pitch * r for size, s, r in zip(shape, strides, by_pixel) if size != 1):
        return None
    return _Run(load.buffer, store.access.buffer, _aligned_offset(store.access), pitch, conv)


def _stores_by_pixel(conv: kir.Conv) -> bool:
    """Whether `conv` writes its destination pixel by pixel in NHWC, at any pitch, and
    has few enough input channels for the copy to cost more than writing it so."""
    plain = not (conv.residual or conv.epilogue is not None or conv.silu or conv.x_copy)
    few = conv.c // conv.group <= SPREAD_MAX_CIN
    return bool(conv.winograd) and plain and few and conv.out_layout == conv.dst_layout == "acdb"


def _dense(shape: tuple[int, ...], strides: tuple) -> bool:
    """Whether `strides` walk `shape` as one contiguous row-major run (dims of size 1
    may have any stride)."""
    row_major = contiguous_strides(shape)
    return all(s == r for size, s, r in zip(shape, strides, row_major) if size != 1)


def buffer_users(kernels: list, buffers) -> tuple[dict[str, list], dict[str, list]]:
    """(writers, readers) of each buffer among `kernels`, in their order."""
    writers: dict[str, list] = defaultdict(list)
    readers: dict[str, list] = defaultdict(list)
    for k in kernels:
        reads, writes = buffers(k)
        for b in writes:
            writers[b].append(k)
        for b in reads:
            readers[b].append(k)
    return writers, readers


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
    return View(root, offset, view.concat, view.pixel_stride)
