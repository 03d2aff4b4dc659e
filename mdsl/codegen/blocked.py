"""Activations kept in oneDNN's blocked layout between the kernels that can read it.

oneDNN's fast convolutions read and write blocked layouts (nChw16c on AVX-512: 16
channels of a pixel side by side, channels padded to a whole block); mdsl's tensors are
NCHW. A convolution computed by oneDNN alone reorders its source into the blocked
layout and its result back, which costs more than the kernel gains where there is
little arithmetic per byte (1x1 and depthwise convolutions; docs/cpu-kernels.md has the
figures). This step, run on the C target's plan after lowering, leaves a tensor blocked
when every kernel that touches it can take it so:

- its writer: a oneDNN convolution whose epilogue is all post-ops and whose primitive
  chose a blocked destination; a pooling or channel Concat whose inputs are blocked;
- its readers: oneDNN convolutions taking it as their source (in the block their
  primitive chose) or as their residual (the sum post-op reorders or copies it into the
  destination), poolings (oneDNN's pooling primitive then computes them, blocked in and
  out) and channel Concats whose output is blocked (each input's channels a multiple of
  the block, so every input is one contiguous run of the output per image: the copy
  kernels are rewritten to copy those runs).

Graph inputs and outputs, and tensors any other kernel reads, stay NCHW: the reorders
happen only at the boundaries of a chain. The blocked set is the largest one meeting
those rules (candidates are dropped until every rule holds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mdsl.codegen import kir
from mdsl.codegen.onednn import channel_block


@dataclass
class _Concat:
    """The copy kernels of one channel Concat (one per input, in input order)."""

    parts: list[kir.Pointwise]

    @property
    def out(self) -> str:
        return self.parts[0].stores[0].access.buffer

    @property
    def sources(self) -> list[str]:
        return [p.loads["src"].buffer for p in self.parts]


def keep_blocked(plan, reads: Callable[[object], set[str]]) -> list[str]:
    """Mark the tensors of `plan` (a plan without control flow) that stay blocked, size
    their buffers for it and rewrite the kernels that touch them; `reads(k)` names the
    buffers kernel `k` reads. Returns the Conv nodes of 1x1 and depthwise convolutions
    sent to oneDNN that read and write NCHW all the same: the two reorders make them
    slower than mdsl's kernels, so the planner plans them again without oneDNN."""
    if plan.has_control_flow:
        return []
    concats = _channel_concats(plan.kernels)
    part_of = {id(p): c for c in concats for p in c.parts}
    readers: dict[str, list] = {}
    for k in plan.kernels:
        for b in reads(k):
            readers.setdefault(b, []).append(part_of.get(id(k), k))
    writers: dict[str, object] = {c.out: c for c in concats}
    writers |= {k.out: k for k in plan.kernels if isinstance(k, kir.Conv | kir.Pool)}
    arena = {b for b, spec in plan.buffers.items() if spec.kind == "arena"}
    layout = _candidates(plan.kernels, concats, arena)
    while True:
        dropped = [b for b in layout if not _holds(b, layout, readers.get(b, []), writers[b])]
        if not dropped:
            break
        for b in dropped:
            del layout[b]
    for b, tag in layout.items():
        _apply(b, tag, readers.get(b, []), writers[b], plan)
    return [k.nodes[0].name for k in plan.kernels if _lonely(k)]


def _lonely(k) -> bool:
    if not isinstance(k, kir.Conv) or not k.onednn or k.x_layout or k.out_layout:
        return False
    return k.kh * k.kw == 1 or k.group == k.c == k.cout > 1


def _candidates(kernels: list, concats: list[_Concat], arena: set[str]) -> dict[str, str]:
    """Buffer -> layout of every tensor a kernel could write blocked (readers aside)."""
    layout: dict[str, str] = {}
    for k in kernels:
        if _conv_writes_blocked(k) and k.out in arena:
            layout[k.out] = k.dst_layout
    for _ in range(len(kernels)):  # pools and concats of blocked tensors
        before = len(layout)
        for k in kernels:
            if _poolable(k) and k.x in layout and k.out in arena:
                layout.setdefault(k.out, layout[k.x])
        for c in concats:
            tags = {layout.get(s) for s in c.sources}
            tag = tags.pop() if len(tags) == 1 else None
            if tag and c.out in arena and _whole_blocks(c, channel_block(tag)):
                layout.setdefault(c.out, tag)
        if len(layout) == before:
            break
    return layout


def _holds(b: str, layout: dict[str, str], readers: list, writer) -> bool:
    """Whether tensor `b` may stay blocked given the blocked set `layout`."""
    tag = layout[b]
    if isinstance(writer, kir.Pool) and layout.get(writer.x) != tag:
        return False
    if isinstance(writer, _Concat) and any(layout.get(s) != tag for s in writer.sources):
        return False
    return bool(readers) and all(_reads(r, b, tag, layout) for r in readers)


def _reads(r, b: str, tag: str, layout: dict[str, str]) -> bool:
    """Whether reader `r` can take tensor `b` in layout `tag`."""
    if isinstance(r, _Concat | kir.Pool):
        return layout.get(r.out) == tag  # blocked in, blocked out
    if not isinstance(r, kir.Conv) or not r.onednn or b in (r.w, r.bias, r.out):
        return False
    if r.epilogue is not None and b in {a.buffer for a in r.epilogue.loads.values()}:
        return False
    return (b == r.x and r.src_layout == tag) or (b == r.residual and b != r.x)


def _apply(b: str, tag: str, readers: list, writer, plan) -> None:
    if isinstance(writer, kir.Conv):
        writer.out_layout = tag
        elements = writer.onednn_dst_elems
    elif isinstance(writer, kir.Pool):
        writer.layout = tag
        block = channel_block(tag)
        elements = writer.n * -(-writer.c // block) * block * _prod(writer.out_spatial)
    else:
        _blocked_copies(writer, tag)
        elements = 0
    for r in readers:
        if isinstance(r, kir.Conv):
            r.x_layout = tag if r.x == b else r.x_layout
            r.residual_layout = tag if r.residual == b else r.residual_layout
    spec = plan.buffers[b]
    spec.elements = max(spec.elements, elements)


def _conv_writes_blocked(k) -> bool:
    """A oneDNN convolution whose whole epilogue is its post-ops, with a blocked result."""
    return isinstance(k, kir.Conv) and bool(k.onednn) and k.epilogue is None and bool(k.dst_layout)


def _poolable(k) -> bool:
    """A 2-D pooling oneDNN's pooling primitive computes as ONNX does: max pooling,
    average pooling that excludes the padding, or one that counts it over windows
    without padding (ONNX counts the padding but not a ceil-mode overhang past it)."""
    if not isinstance(k, kir.Pool) or len(k.in_spatial) != 2 or pool_pad_end(k) is None:
        return False
    if k.kind == "max" or not k.count_include_pad:
        return True
    return not any(k.pads) and not any(pool_pad_end(k) or ())


def pool_pad_end(k: kir.Pool) -> list[int] | None:
    """The padding after the input oneDNN takes for the pooling `k`: what the output size
    implies (ceil mode's overhang included), 0 where the last window ends inside the
    input; None when oneDNN's output size would differ."""
    ends = []
    for o, s, w, d, i, p in zip(
        k.out_spatial, k.strides, k.kernel, k.dilations, k.in_spatial, k.pads
    ):
        end = max(0, (o - 1) * s + (w - 1) * d + 1 - i - p)
        if (i + p + end - (w - 1) * d - 1) // s + 1 != o:
            return None
        ends.append(end)
    return ends


def _channel_concats(kernels: list) -> list[_Concat]:
    """The copy kernels of each 4-D Concat along channels, grouped by node."""
    by_node: dict[str, list[kir.Pointwise]] = {}
    for k in kernels:
        if isinstance(k, kir.Pointwise) and len(k.nodes) == 1 and k.nodes[0].op_type == "Concat":
            by_node.setdefault(k.nodes[0].name, []).append(k)
    out = []
    for parts in by_node.values():
        shapes = [p.shape for p in parts]
        if all(len(s) == 4 for s in shapes) and len({(s[0], *s[2:]) for s in shapes}) == 1:
            store = parts[0].stores[0].access
            plane = shapes[0][2] * shapes[0][3]
            if store.strides[1] == plane and all(
                p.stores[0].access.buffer == store.buffer for p in parts
            ):
                out.append(_Concat(parts))
    return out


def _whole_blocks(c: _Concat, block: int) -> bool:
    return all(p.shape[1] % block == 0 for p in c.parts)


def _blocked_copies(c: _Concat, tag: str) -> None:
    """Rewrite the copies of a Concat whose inputs and output are in layout `tag`.
    Channels last: input i's pixel (n, y, x) goes to channels [start, start + C_i) of the
    output's pixel. Blocks of b channels (each C_i a multiple of b): per image, input i
    is one run of C_i * H * W floats at offset start * H * W of the output's image."""
    total = sum(p.shape[1] for p in c.parts)
    for p in c.parts:
        n, ci, h, w = p.shape
        store, load = p.stores[0].access, p.loads["src"]
        start = store.offset // (h * w)
        if channel_block(tag) == 1:
            space = (n, h, w, ci)
            src = (h * w * ci, w * ci, ci, 1)
            dst, offset = (h * w * total, w * total, total, 1), start
        else:
            space, src = (n, ci * h * w), (ci * h * w, 1)
            dst, offset = (total * h * w, 1), start * h * w
        p.shape = space
        p.loads["src"] = kir.Access(load.buffer, load.dtype, 0, src)
        p.stores[0] = kir.Store(
            kir.Access(store.buffer, store.dtype, offset, dst), p.stores[0].value
        )


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out
