"""ONNX's sequence ops, for sequences whose structure is known at import time.

mdsl has no sequence type: a sequence is a list of tensors the importer holds while it
builds the graph (`_Importer.sequence_of`). SequenceConstruct, SequenceEmpty,
SequenceInsert and SequenceErase edit the list; SequenceAt picks a tensor, SequenceLength
is an import-time int64 scalar; SplitToSequence is a Split (or per-row slices), and
ConcatFromSequence a Concat (or a stack). That covers what exporters write outside loops
(torch's `split` / `unbind` followed by `cat` / `stack`). Positions must be import-time
values; a sequence that is a graph input or output, or that a Loop carries, is a
GraphError saying so.
"""

from __future__ import annotations

import numpy as np

from mdsl.frontends.onnx_rules import emit1, rule
from mdsl.ir.errors import GraphError


def _position(ctx, node, index: int, length: int, *, insert: bool) -> int:
    """The import-time position input `index` of `node` (default: the end), checked."""
    value = ctx.constant_input(node, index, "position")
    if value is None:
        return length if insert else length - 1
    position = int(np.asarray(value).reshape(-1)[0])
    top = length if insert else length - 1
    if not -length <= position <= top:
        raise GraphError(f"position {position} is outside [{-length}, {top}] for {length} tensors")
    return position + length if position < 0 else position


@rule("SequenceEmpty")
def sequence_empty(ctx, node) -> list:
    return [ctx.sequence_value([])]


@rule("SequenceConstruct")
def sequence_construct(ctx, node) -> list:
    return [ctx.sequence_value([ctx.tensor(name) for name in node.inputs])]


@rule("SequenceInsert")
def sequence_insert(ctx, node) -> list:
    items = list(ctx.sequence_of(node.inputs[0]))
    items.insert(_position(ctx, node, 2, len(items), insert=True), ctx.tensor(node.inputs[1]))
    return [ctx.sequence_value(items)]


@rule("SequenceErase")
def sequence_erase(ctx, node) -> list:
    items = list(ctx.sequence_of(node.inputs[0]))
    if not items:
        raise GraphError("SequenceErase of an empty sequence")
    del items[_position(ctx, node, 1, len(items), insert=False)]
    return [ctx.sequence_value(items)]


@rule("SequenceAt")
def sequence_at(ctx, node) -> list:
    items = ctx.sequence_of(node.inputs[0])
    if not items:
        raise GraphError("SequenceAt of an empty sequence")
    value = ctx.constant_input(node, 1, "position")
    position = int(np.asarray(value).reshape(-1)[0])
    if not -len(items) <= position < len(items):
        raise GraphError(f"position {position} is outside the {len(items)} tensors")
    with ctx.scope_of(node) as leaf:
        return ctx.emit("Identity", [items[position]], {}, name=leaf)


@rule("SequenceLength")
def sequence_length(ctx, node) -> list:
    return [ctx.constant_value(np.array(len(ctx.sequence_of(node.inputs[0])), np.int64))]


@rule("SplitToSequence")
def split_to_sequence(ctx, node) -> list:
    """Pieces of `split` sizes (one size: chunks of it, the last maybe shorter), or one
    per index along `axis` (squeezed away unless keepdims=1)."""
    x = ctx.tensor(node.inputs[0])
    axis = int(node.attrs.get("axis", 0)) % max(x.ndim, 1)
    dim = x.shape[axis]
    if not isinstance(dim, int):
        raise GraphError(f"SplitToSequence along axis {axis} of size {dim}: needs a static size")
    split = ctx.constant_input(node, 1, "split")
    with ctx.scope_of(node, composite=True):
        if split is None:
            rows = [
                emit1(ctx, "Slice", x, starts=(i,), ends=(i + 1,), axes=(axis,)) for i in range(dim)
            ]
            if int(node.attrs.get("keepdims", 1)):
                return [ctx.sequence_value(rows)]
            return [ctx.sequence_value([emit1(ctx, "Squeeze", r, axes=(axis,)) for r in rows])]
        sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        if np.asarray(split).ndim == 0:
            sizes = [sizes[0]] * (dim // sizes[0]) + ([dim % sizes[0]] if dim % sizes[0] else [])
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise GraphError(f"split sizes {sizes} do not add up to axis {axis}'s size {dim}")
        pieces, start = [], 0
        for size in sizes:
            pieces.append(
                emit1(ctx, "Slice", x, starts=(start,), ends=(start + size,), axes=(axis,))
            )
            start += size
        return [ctx.sequence_value(pieces)]


@rule("ConcatFromSequence")
def concat_from_sequence(ctx, node) -> list:
    """Concat along `axis`, or (new_axis=1) stack along a new axis `axis`."""
    items = ctx.sequence_of(node.inputs[0])
    if not items:
        raise GraphError("ConcatFromSequence of an empty sequence")
    axis = int(node.attrs.get("axis"))
    new_axis = bool(int(node.attrs.get("new_axis", 0)))
    with ctx.scope_of(node, composite=True):
        if new_axis:
            rank = items[0].ndim + 1
            items = [emit1(ctx, "Unsqueeze", t, axes=(axis % rank,)) for t in items]
        return ctx.emit("Concat", list(items), {"axis": axis})
