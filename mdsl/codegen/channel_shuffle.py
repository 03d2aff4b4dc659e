"""A channel shuffle as one copy kernel, which also runs over channels-last tensors.

ShuffleNet mixes the channels of its grouped convolutions with Reshape [N, C, H, W] ->
[N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4), Reshape back: lowered, three copies (the
two reshapes flat, the transpose moving whole planes). The reshapes copy a tensor to a
buffer of the same flat order, so the transpose can read the first's source and write
the second's destination itself: one copy instead of three (`fold_shuffles`).

That copy moves channels only: each loop dim of it steps over images, over channels
or over pixels, the same pixel in source and destination. Over channels-last tensors
(oneDNN's NHWC, `mdsl.codegen.blocked`) the same loops copy the same elements with
each dim's strides rescaled (`to_channels_last`): a pixel step of s floats becomes
s * C, a channel step of s planes becomes s; images keep theirs. So a convolution
chain kept channels last stays so through the shuffle, without a reorder on each side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mdsl.codegen import kir
from mdsl.codegen.access import contiguous_strides


@dataclass
class Shuffle:
    """A copy kernel permuting the channels of an NCHW tensor of `shape` into another
    of that shape."""

    kernel: kir.Pointwise
    shape: tuple[int, int, int, int]

    @property
    def src(self) -> str:
        return next(iter(self.kernel.loads.values())).buffer

    @property
    def out(self) -> str:
        return self.kernel.stores[0].access.buffer


def fold_shuffles(plan, reads: Callable[[object], set[str]]) -> list[Shuffle]:
    """Fold the two reshape copies around each Transpose of a channel shuffle in `plan`
    (a plan without control flow) into the transpose's kernel, drop their kernels and
    buffers, and return the shuffles; `reads(k)` names the buffers kernel `k` reads."""
    readers: dict[str, list] = {}
    for k in plan.kernels:
        for b in reads(k):
            readers.setdefault(b, []).append(k)
    writer = {s.access.buffer: k for k in plan.kernels if _is_copy(k) for s in k.stores}
    out, dropped = [], set()
    for k in plan.kernels:
        if not _is_copy(k) or [n.op_type for n in k.nodes] != ["Transpose"]:
            continue
        load, store = _ends(k)
        before, after = writer.get(load.buffer), readers.get(store.buffer, [None])
        if len(after) != 1 or not (_flat(before) and _flat(after[0])):
            continue
        after = after[0]
        if id(before) in dropped or id(after) in dropped:
            continue  # a reshape between two transposes (MobileViT's folding) folds once
        inside = (load.buffer, store.buffer)
        if any(plan.buffers[b].kind != "arena" for b in inside) or len(after.shape) != 4:
            continue
        if len(readers[load.buffer]) != 1 or writer.get(store.buffer) is not k:
            continue
        name, (src, _), (_, dst) = next(iter(k.loads)), _ends(before), _ends(after)
        k.loads = {name: replace(load, buffer=src.buffer)}
        k.stores = [kir.Store(replace(store, buffer=dst.buffer), k.stores[0].value)]
        k.nodes = [*before.nodes, *k.nodes, *after.nodes]
        dropped |= {id(before), id(after)}
        for b in (load.buffer, store.buffer):
            del plan.buffers[b]
        if channel_steps(k, after.shape) is not None:
            out.append(Shuffle(k, after.shape))
    plan.kernels = [k for k in plan.kernels if id(k) not in dropped]
    return out


def _is_copy(k) -> bool:
    """A pointwise kernel storing its one load unchanged."""
    if not isinstance(k, kir.Pointwise) or len(k.loads) != 1 or len(k.stores) != 1 or k.lets:
        return False
    (name, load), store = next(iter(k.loads.items())), k.stores[0]
    return str(store.value) == name and load.dtype == store.access.dtype


def _ends(k: kir.Pointwise) -> tuple[kir.Access, kir.Access]:
    return next(iter(k.loads.values())), k.stores[0].access


def _flat(k) -> bool:
    """A copy in flat order (a reshape) of a whole buffer into another."""
    if k is None or not _is_copy(k):
        return False
    whole = contiguous_strides(k.shape)
    return all(a.offset == 0 and a.strides == whole for a in _ends(k))


def channel_steps(k: kir.Pointwise, shape) -> list[str] | None:
    """What each loop dim of the copy `k` steps over, between two contiguous NCHW
    tensors of `shape`: "n" images (same stride both sides), "c" channels (whole
    planes, any stride) or "p" pixels (same stride both sides, inside a plane); None
    when `k` is not such a copy (both offsets 0, all of every axis covered)."""
    n, c, h, w = shape
    plane, image = h * w, c * h * w
    load, store = _ends(k)
    if load.offset or store.offset or not all(isinstance(d, int) for d in k.shape):
        return None
    kinds, extent = [], {"n": 1, "c": 1, "p": 1}
    for size, a, b in zip(k.shape, load.strides, store.strides):
        if size == 1:
            kind = "n"
        elif not (a and b):
            return None
        elif a == b and a % image == 0:
            kind = "n"
        elif a % plane == 0 and b % plane == 0 and max(a, b) < image:
            kind = "c"
        elif a == b and a < plane:
            kind = "p"
        else:
            return None
        kinds.append(kind)
        extent[kind] *= size
    return kinds if (extent["n"], extent["c"], extent["p"]) == (n, c, plane) else None


def to_channels_last(s: Shuffle) -> None:
    """Rewrite the shuffle `s` to copy between channels-last tensors (each pixel's C
    channels side by side), its loops reordered images, pixels, then channels, so that
    each pixel's channels are copied together."""
    k, (_, c, h, w) = s.kernel, s.shape
    kinds = channel_steps(k, s.shape)
    assert kinds is not None
    rescale = {"n": lambda v: v, "c": lambda v: v // (h * w), "p": lambda v: v * c}
    order = sorted(range(len(kinds)), key=lambda i: "npc".index(kinds[i]))

    def moved(a: kir.Access) -> kir.Access:
        strides = [0 if k.shape[i] == 1 else rescale[kinds[i]](a.strides[i]) for i in order]
        return replace(a, strides=tuple(strides))

    name, load = next(iter(k.loads.items()))
    k.shape = tuple(k.shape[i] for i in order)
    k.loads = {name: moved(load)}
    k.stores = [kir.Store(moved(k.stores[0].access), k.stores[0].value)]
