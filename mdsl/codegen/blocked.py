"""Activations kept in oneDNN's blocked layout between the kernels that can read it.

oneDNN's fast convolutions read and write blocked layouts (nChw16c on AVX-512: 16
channels of a pixel side by side, channels padded to a whole block); mdsl's tensors are
NCHW. A convolution computed by oneDNN alone reorders its source into the blocked
layout and its result back, which costs more than the kernel gains where there is
little arithmetic per byte (1x1 and depthwise convolutions; docs/cpu-kernels.md has the
figures). This step, run on the C target's plan after lowering, leaves a tensor blocked
when every kernel that touches it can take it so:

- its writer: a oneDNN convolution whose epilogue is all post-ops and whose primitive
  chose a blocked destination; a pooling or channel Concat whose inputs are blocked; an
  element-wise kernel reading a blocked tensor; a channel shuffle of a channels-last
  tensor (`mdsl.codegen.channel_shuffle`, channels last in and out);
- its readers: oneDNN convolutions taking it as their source (in the layout their
  primitive chose, or reordered from another into their scratch) or as their residual (the sum post-op reorders or copies it into the
  destination), poolings (oneDNN's pooling primitive then computes them, blocked in and
  out) and channel Concats whose output is blocked (each input's channels a multiple of
  the block, so every input is one contiguous run of the output per image: the copy
  kernels are rewritten to copy those runs; a Concat whose output stays NCHW copies each
  kept input from its layout, so DenseNet's last block and Inception's last Concat do
  not make every tensor before them NCHW), element-wise kernels (a pre-activation
  BatchNorm + ReLU: every operand the whole tensor or one value per channel or image)
  and channel shuffles writing a channels-last tensor.

An element-wise kernel computes the same in any layout of its operands, so it is
rewritten to run over (n, channel block, h, w, channel in block) with each operand's
strides for its own layout (channels last: one block of all channels): blocked or NCHW
in and out alike, per-channel operands contiguous along the inner loop.

Graph inputs and outputs, and tensors any other kernel reads, stay NCHW: the reorders
happen only at the boundaries of a chain. The blocked set is the largest one meeting
those rules (candidates are dropped until every rule holds).

At a chain's start, an NCHW tensor several oneDNN convolutions read in one layout (a
ResNet block's input: the first convolution's source and the last one's residual) is
reordered once: the first keeps its reordered source in a buffer the others read. At a
chain's end, a convolution with an NCHW result computes in its kept residual's buffer
when it reads that last (its sum post-op needs the residual in the destination anyway),
then reorders to NCHW; with a kept result, the memory plan puts the result over such a
residual (`plan._sums_into_residual`) and the copy into the destination is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mdsl.codegen import kir
from mdsl.codegen.channel_shuffle import Shuffle, fold_shuffles, to_channels_last
from mdsl.codegen.onednn import channel_block
from mdsl.ir.dtype import DType


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
    shuffles = fold_shuffles(plan, reads)
    rows = {}  # global average pools as poolings, to run on oneDNN if their input is kept
    for i, k in enumerate(plan.kernels):
        pool = _as_pooling(k)
        if pool is not None:
            rows[id(pool)] = k
            plan.kernels[i] = pool
    concats = _channel_concats(plan.kernels)
    part_of: dict[int, _Concat | Shuffle] = {id(p): c for c in concats for p in c.parts}
    part_of |= {id(s.kernel): s for s in shuffles}
    readers: dict[str, list] = {}
    for k in plan.kernels:
        for b in reads(k):
            readers.setdefault(b, []).append(part_of.get(id(k), k))
    writers: dict[str, object] = {c.out: c for c in (*concats, *shuffles)}
    writers |= {k.out: k for k in plan.kernels if isinstance(k, kir.Conv | kir.Pool)}
    elementwise = [k for k in plan.kernels if id(k) not in part_of and _elementwise(k)]
    writers |= {s.access.buffer: k for k in elementwise for s in k.stores}
    arena = {b for b, spec in plan.buffers.items() if spec.kind == "arena"}
    layout = _candidates(plan.kernels, concats, elementwise, shuffles, arena)
    while True:
        dropped = [b for b in layout if not _holds(b, layout, readers.get(b, []), writers[b])]
        if not dropped:
            break
        for b in dropped:
            del layout[b]
    for b, tag in layout.items():
        _apply(b, tag, readers.get(b, []), writers[b], plan)
    for k in elementwise:
        _elementwise_in_layouts(k, layout)
    for shuffle in shuffles:
        if shuffle.out in layout:
            to_channels_last(shuffle)
    for c in concats:
        if c.out not in layout:  # copies from kept inputs into the NCHW result
            for part in c.parts:
                _elementwise_in_layouts(part, layout)
    plan.kernels = [rows[id(k)] if id(k) in rows and not k.layout else k for k in plan.kernels]
    lonely = [k.nodes[0].name for k in plan.kernels if _lonely(k)]
    if not lonely:
        _reorder_shared_sources_once(plan)
        _destinations_in_residuals(plan, reads)
        for k in plan.kernels:
            _trim_scratch(k, plan)
    return lonely


def _reorder_shared_sources_once(plan) -> None:
    """A tensor that oneDNN convolutions read in one layout more than once, each through
    a reorder (as a source, or as a residual in their destination's layout: a ResNet
    block's NCHW input; ResNet's max pool, kept nChw16c, read by two NHWC 1x1s), is
    reordered once. The first of them reads it as its source and keeps its reordered
    copy in a new buffer; the others read that copy, in place of a reorder each."""
    for b, users in _blocked_uses(plan).items():
        first, tag = users[0]
        if len(users) < 2 or first.x != b or not all(t == tag for _, t in users):
            continue
        copy = f"{b}_{tag}"
        elements = first.onednn_src_elems  # the floats of its layout, channels padded
        plan.buffers[copy] = replace(
            plan.buffers[b], name=copy, tensor=None, elements=elements, kind="arena", slot=0
        )
        first.x_copy, first.x_copy_layout = copy, tag
        for k, _ in users[1:]:
            if k.x == b:
                k.x, k.x_layout = copy, tag
            if k.residual == b:
                k.residual, k.residual_layout = copy, tag


def _blocked_uses(plan) -> dict[str, list]:
    """Tensor -> [(oneDNN convolution, the layout it reorders it into)] for each one
    that reads it through a reorder of its own (from NCHW or from another kept layout),
    in kernel order."""
    uses: dict[str, list] = {}
    for k in plan.kernels:
        if not isinstance(k, kir.Conv) or not k.onednn or k.x == k.residual:
            continue
        if k.x_layout != k.src_layout and k.src_layout and k.onednn_src_elems:
            uses.setdefault(k.x, []).append((k, k.src_layout))
        if k.residual and k.residual_layout != k.dst_layout and k.dst_layout:
            uses.setdefault(k.residual, []).append((k, k.dst_layout))
    return uses


def _destinations_in_residuals(plan, reads: Callable[[object], set[str]]) -> None:
    """A oneDNN convolution that writes an NCHW result through a scratch destination, and
    reads last a kept residual in that destination's layout, computes in the residual's
    buffer: its sum post-op needs the residual there, so nothing is copied. Not when the
    residual is its source too (`conv(h) + h`): it would overwrite what it still reads."""
    last: dict[str, object] = {}
    for k in plan.kernels:
        for b in reads(k):
            last[b] = k
    for k in plan.kernels:
        if not isinstance(k, kir.Conv) or not k.onednn or not k.residual or k.out_layout:
            continue
        if k.residual == k.x:
            continue
        in_place = k.residual_layout and k.residual_layout == k.dst_layout
        if in_place and last.get(k.residual) is k and plan.buffers[k.residual].kind == "arena":
            k.dst_in_residual = True


def _trim_scratch(k, plan) -> None:
    """The scratch of a oneDNN convolution without the reordered source or destination
    it does not need: its tensors are kept in the layouts its primitives choose at every
    team size (the generated code refuses a primitive needing a reorder it has no room
    for, rather than write past the scratch)."""
    if not isinstance(k, kir.Conv) or not k.onednn or not k.scratch or not k.same_layouts:
        return
    if (k.x_copy_layout or k.x_layout) == k.src_layout:
        k.onednn_src_elems = 0
    if k.out_layout == k.dst_layout or k.dst_in_residual:
        k.onednn_dst_elems = 0
    k.scratch_elems = k.onednn_src_elems + k.onednn_dst_elems
    plan.buffers[k.scratch].elements = k.scratch_elems


def _lonely(k) -> bool:
    if not isinstance(k, kir.Conv) or not k.onednn or k.x_layout or k.out_layout:
        return False
    return k.kh * k.kw == 1 or k.group == k.c == k.cout > 1


def _candidates(
    kernels: list,
    concats: list[_Concat],
    elementwise: list[kir.Pointwise],
    shuffles: list[Shuffle],
    arena: set[str],
) -> dict[str, str]:
    """Buffer -> layout of every tensor a kernel could write blocked (readers aside)."""
    layout: dict[str, str] = {}
    for k in kernels:
        if _conv_writes_blocked(k) and k.out in arena:
            layout[k.out] = k.dst_layout
    for _ in range(len(kernels)):  # pools, concats and element-wise kernels of blocked tensors
        before = len(layout)
        for k in kernels:
            if _poolable(k) and k.x in layout and k.out in arena:
                layout.setdefault(k.out, layout[k.x])
        for k in elementwise:
            tags = [layout[b] for b in _whole(k) if b in layout]
            if tags and _fits(k, tags[0]):
                for store in k.stores:
                    if store.access.buffer in arena:
                        layout.setdefault(store.access.buffer, tags[0])
        for c in concats:
            tags = {layout.get(s) for s in c.sources}
            tag = tags.pop() if len(tags) == 1 else None
            if tag and c.out in arena and _whole_blocks(c, channel_block(tag)):
                layout.setdefault(c.out, tag)
        for shuffle in shuffles:  # channels last only: a permutation of each pixel's
            tag = layout.get(shuffle.src, "")
            if tag and channel_block(tag) == 1 and shuffle.out in arena:
                layout.setdefault(shuffle.out, tag)
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
    if isinstance(writer, Shuffle) and layout.get(writer.src) != tag:
        return False
    if isinstance(writer, kir.Pointwise) and not _one_layout(writer, layout):
        return False
    shape = _shape_of(writer)
    return bool(readers) and all(_reads(r, b, tag, layout, shape) for r in readers)


def _reads(r, b: str, tag: str, layout: dict[str, str], shape: tuple) -> bool:
    """Whether reader `r` can take tensor `b` (NCHW `shape`) in layout `tag`."""
    if isinstance(r, kir.Pool) and _global(r) and r.out not in layout:
        return r.c % channel_block(tag) == 0  # its (n, c, 1, 1) result is NCHW alike
    if isinstance(r, kir.Pool | Shuffle):
        return layout.get(r.out) == tag  # blocked in, blocked out
    if isinstance(r, _Concat):  # blocked in and out, or copied from `tag` into NCHW
        if r.out in layout:
            return layout[r.out] == tag
        parts = [p for p in r.parts if p.loads["src"].buffer == b]
        return all(_fits(p, tag) and b in _whole(p) for p in parts)
    if isinstance(r, kir.Pointwise):  # element-wise, over the same NCHW shape
        return tuple(r.shape) == shape and b in _whole(r) and _one_layout(r, layout)
    if not isinstance(r, kir.Conv) or not r.onednn or b in (r.w, r.bias, r.out):
        return False
    if r.epilogue is not None and b in {a.buffer for a in r.epilogue.loads.values()}:
        return False
    # a source in another layout than the primitive's is reordered into its scratch (one
    # reorder, where NCHW between them would take two: ResNet's nChw16c stem and pool
    # before NHWC 1x1 convolutions)
    takes_x = r.src_layout == tag or r.onednn_src_elems > 0
    return (b == r.x and takes_x) or (b == r.residual and b != r.x)


def _shape_of(writer) -> tuple:
    """The NCHW shape of the tensor `writer` writes."""
    if isinstance(writer, kir.Conv):
        return tuple(writer.out_shape)
    if isinstance(writer, kir.Pool):
        return (writer.n, writer.c, *writer.out_spatial)
    if isinstance(writer, Shuffle):
        return writer.shape
    if isinstance(writer, _Concat):
        n, _, h, w = writer.parts[0].shape
        return (n, sum(p.shape[1] for p in writer.parts), h, w)
    return tuple(writer.shape)


def _apply(b: str, tag: str, readers: list, writer, plan) -> None:
    if isinstance(writer, kir.Pointwise | Shuffle):
        elements = 0  # its channels fill whole blocks (or are last): as many floats as NCHW
    elif isinstance(writer, kir.Conv):
        writer.out_layout = tag
        elements = writer.onednn_dst_elems
    elif isinstance(writer, kir.Pool):
        writer.layout = tag
        block = channel_block(tag)
        elements = writer.n * -(-writer.c // block) * block * _prod(writer.out_spatial)
    else:
        _blocked_copies(writer, tag)
        elements = 0
    for r in readers:  # element-wise readers are rewritten last, knowing every layout
        if isinstance(r, kir.Pool):
            r.layout = tag
        if isinstance(r, kir.Conv):
            r.x_layout = tag if r.x == b else r.x_layout
            r.residual_layout = tag if r.residual == b else r.residual_layout
    spec = plan.buffers[b]
    spec.elements = max(spec.elements, elements)


def _elementwise(k) -> bool:
    """A pointwise kernel over a static NCHW space whose every operand is either the
    whole tensor (contiguous, from its start) or broadcast over the pixels (one value
    per channel, per image or in all): it computes the same in any layout."""
    if not isinstance(k, kir.Pointwise) or len(k.shape) != 4:
        return False
    if not all(isinstance(d, int) for d in k.shape):
        return False
    whole = _contiguous(k.shape)
    accesses = [*k.loads.values(), *(s.access for s in k.stores)]
    if any(a.strides != whole or a.offset != 0 for a in (s.access for s in k.stores)):
        return False
    return all(
        (a.strides == whole and a.offset == 0) or a.strides[2] == a.strides[3] == 0
        for a in accesses
    )


def _whole(k: kir.Pointwise) -> set[str]:
    """The buffers `k` only reads or writes whole (others are broadcast over pixels)."""
    whole = _contiguous(k.shape)
    accesses = [*k.loads.values(), *(s.access for s in k.stores)]
    full = {a.buffer for a in accesses if a.strides == whole and a.offset == 0}
    return full - {a.buffer for a in accesses if a.strides != whole or a.offset != 0}


def _fits(k: kir.Pointwise, tag: str) -> bool:
    """Whether `k`'s channels fill whole blocks of `tag` (no padding channels to skip)."""
    return k.shape[1] % channel_block(tag) == 0


def _one_layout(k: kir.Pointwise, layout: dict[str, str]) -> bool:
    """Whether the blocked operands of the element-wise kernel `k` share one layout its
    channels fill (NCHW operands are fine beside them)."""
    tags = {layout[b] for b in _whole(k) if b in layout}
    return len(tags) <= 1 and all(_fits(k, t) for t in tags)


def _elementwise_in_layouts(k: kir.Pointwise, layout: dict[str, str]) -> None:
    """Rewrite the element-wise kernel `k` over (n, channel block, h, w, channel in
    block) with each operand's strides for its layout (`layout` names the blocked ones;
    the rest are NCHW); unchanged when it touches no blocked tensor."""
    full = _whole(k)
    tags = {layout[b] for b in full if b in layout}
    if not tags:
        return
    n, c, h, w = k.shape
    block = channel_block(tags.pop())
    block = c if block == 1 else block  # channels last: one block of all channels
    kept = (c * h * w, h * w * block, w * block, block, 1)

    def moved(a: kir.Access) -> kir.Access:
        if a.buffer in layout and a.buffer in full:
            return kir.Access(a.buffer, a.dtype, 0, kept)
        s0, s1, s2, s3 = a.strides
        return kir.Access(a.buffer, a.dtype, a.offset, (s0, s1 * block, s2, s3, s1))

    k.shape = (n, c // block, h, w, block)
    k.loads = {name: moved(a) for name, a in k.loads.items()}
    k.stores = [kir.Store(moved(s.access), s.value) for s in k.stores]


def _contiguous(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _as_pooling(k) -> kir.Pool | None:
    """The global average pool `k` (a row kernel of that node alone: the mean of each
    (n, c) plane of a static NCHW tensor) as an average pooling over the whole plane,
    which oneDNN computes in the kept layout; None for any other kernel."""
    if not isinstance(k, kir.Rowwise) or [n.op_type for n in k.nodes] != ["GlobalAveragePool"]:
        return None
    shape = (*k.outer_shape, *k.row_shape)
    stores = [p for p in k.phases if isinstance(p, kir.Store)]
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape) or len(stores) != 1:
        return None
    (load,) = k.loads.values()
    if load.strides != _contiguous(shape) or load.offset != 0 or load.dtype != DType.float32:
        return None
    n, c, h, w = shape
    return kir.Pool(
        k.name, k.nodes, DType.float32, "avg", load.buffer, stores[0].access.buffer,
        n, c, (h, w), (1, 1), (h, w), (1, 1), (0, 0), (1, 1), False,
    )  # fmt: skip


def _global(k: kir.Pool) -> bool:
    return k.out_spatial == (1, 1) and k.kernel == k.in_spatial and k.kind == "avg"


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
