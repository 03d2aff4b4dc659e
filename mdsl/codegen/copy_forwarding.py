"""Copies of a contiguous run forwarded: their readers read the run where it lies.

A Slice of whole leading blocks (a Gather of one constant index, rewritten as a Slice
by `mdsl.passes.simplify`) lowers to a copy of one contiguous run of its source into a
buffer of its own, in the same order. Every element a reader loads from that buffer at
flat position i is the source's element at the run's offset + i, so a reader whose loads
are strided accesses (a pointwise or row kernel) can load from the source instead, its
offsets moved by the run's: the copy and its buffer go (XLA's and TVM's slice-as-view).
A ViT attention picks Q, K and V out of one fused projection so: three copies of
[197, 768] before their head transposes.

A copy is forwarded when (`forward_run_copies`):
- it is the only kernel writing its destination, an arena buffer it fills whole, in
  flat order, from a run of its source (any static offset, the same order);
- every reader of the destination is a pointwise or row kernel (which read through
  their loads) reading it with the copy's element type, and no other kernel writes it;
- no kernel writes the source between the copy and the destination's last reader.
Plans with control flow keep their copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from mdsl.codegen import kir
from mdsl.codegen.access import contiguous_strides
from mdsl.codegen.concat_in_place import buffer_users, roots


def forward_run_copies(plan, buffers: Callable[[object], tuple[set[str], set[str]]]) -> int:
    """Forward the run copies of `plan` that qualify (module doc) and drop them; returns
    how many went. `buffers(k)` is (the buffers kernel `k` reads, those it writes)."""
    if plan.has_control_flow:
        return 0
    position = {id(k): i for i, k in enumerate(plan.kernels)}
    writers, readers = buffer_users(plan.kernels, buffers)
    dropped: set[int] = set()
    for k in list(plan.kernels):
        run = _run_copy(k, plan)
        if run is None:
            continue
        src, dst = run
        targets = readers[dst.buffer]
        if not _forwardable(k, src.buffer, targets, writers[dst.buffer], writers, position):
            continue
        for r in targets:
            r.loads = {n: _moved(a, dst.buffer, src) for n, a in r.loads.items()}
        readers[src.buffer] += targets
        del plan.buffers[dst.buffer]
        dropped.add(id(k))
    plan.kernels = [k for k in plan.kernels if id(k) not in dropped]
    return len(dropped)


def _run_copy(k, plan) -> tuple[kir.Access, kir.Access] | None:
    """(load, store) when `k` copies a contiguous run, in order, into a whole arena buffer."""
    if not isinstance(k, kir.Pointwise) or len(k.loads) != 1 or len(k.stores) != 1 or k.lets:
        return None
    (name, load), store = next(iter(k.loads.items())), k.stores[0].access
    if str(k.stores[0].value) != name or load.dtype != store.dtype:
        return None
    shape = tuple(k.shape)
    if not all(isinstance(d, int) for d in shape) or not isinstance(load.offset, int):
        return None
    dense = contiguous_strides(shape)
    in_order = all(
        a == d and s == d for n, a, s, d in zip(shape, load.strides, store.strides, dense) if n != 1
    )
    spec = plan.buffers.get(store.buffer)
    whole = spec is not None and spec.kind == "arena" and spec.elements == math.prod(shape)
    whole = whole and store.buffer not in roots(plan)  # a Concat's output holding views
    if not (in_order and whole and store.offset == 0) or load.buffer == store.buffer:
        return None
    return load, store


def _forwardable(copy, src: str, targets: list, dst_writers: list, writers, position) -> bool:
    """Whether the readers `targets` of the copy's destination can all read `src` instead
    (module doc): pointwise or row kernels after the copy, its only writer, reading the
    destination in the copy's element type, with no write of `src` until the last."""
    dtype, at = copy.stores[0].access.dtype, position[id(copy)]
    if not targets or dst_writers != [copy]:
        return False
    dst = copy.stores[0].access.buffer
    for k in targets:
        if not isinstance(k, (kir.Pointwise, kir.Rowwise)) or position[id(k)] < at:
            return False
        if any(a.buffer == dst and a.dtype != dtype for a in k.loads.values()):
            return False
    last = max(position[id(k)] for k in targets)
    return not any(at < position[id(w)] <= last for w in writers[src])


def _moved(access: kir.Access, dst: str, src: kir.Access) -> kir.Access:
    """`access` of `dst` as the same access of the run `src` copied into it."""
    if access.buffer != dst:
        return access
    return replace(access, buffer=src.buffer, offset=access.offset + src.offset)
