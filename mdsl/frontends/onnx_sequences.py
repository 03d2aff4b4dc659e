"""ONNX's sequence and optional values, with their structure fixed at import time.

mdsl has no sequence type: a sequence is a list of tensors the importer holds while it
builds the graph (`_Importer.sequence_of`), and an optional is its content or *absent*.
Their structure (a sequence's length, whether an optional holds something) is decided
at import; the tensors in them are ordinary run-time tensors.

- SequenceConstruct, SequenceEmpty, SequenceInsert and SequenceErase edit the list;
  SequenceAt picks a tensor, SequenceLength is an import-time int64 scalar;
  SplitToSequence is a Split (or per-row slices), ConcatFromSequence a Concat (or a
  stack). Positions must be import-time values.
- Graph inputs: a sequence input `x` of n tensors is n graph inputs `x.0` ... `x.{n-1}`
  (`element_name`); n comes from `load(..., structure={"x": n})` (or a list of the
  elements' shapes, for elements whose type declares no rank). Each element has sizes
  of its own: a declared dim `N` is the symbol `N_k` in element k (the model's `N` when a
  tensor input declares `N` too: one size across the model). An optional input is
  its content, or absent when `structure` says None. `flatten_feeds` turns a feed that
  is a list (or None) into those inputs; `pack_outputs` regroups outputs.
- Graph outputs: a sequence output `y` is outputs `y.0`, `y.1`, ...; an absent optional
  output is no output.
- Optional makes an optional (absent without input); OptionalHasElement is an
  import-time bool; OptionalGetElement is the content (absent: a GraphError).
- SequenceMap and a Loop carrying a sequence or optional are unrolled at import (the
  body imported once per element / iteration, `import_values`); the Loop's trip count
  and condition must then be import-time values (`unrolled_loop`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from mdsl.frontends.onnx_ops import dtype_from_onnx
from mdsl.frontends.onnx_rules import emit1, rule
from mdsl.ir.errors import GraphError

# ops whose outputs are sequences or optionals: imported by their rules, never evaluated
STRUCTURE_OPS = frozenset(
    {
        "SequenceEmpty",
        "SequenceConstruct",
        "SequenceInsert",
        "SequenceErase",
        "SplitToSequence",
        "SequenceMap",
        "Optional",
        "OptionalGetElement",
        "OptionalHasElement",
    }
)
UNROLL_LIMIT = 4096  # Loop iterations / sequence elements one import may unroll


def innermost_tensor_type(type_proto):
    """The tensor type a value's type holds (itself, or inside sequences and optionals),
    None when it holds none (maps, strings aside: sparse tensors, no type)."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return type_proto.tensor_type
    if kind == "sequence_type":
        return innermost_tensor_type(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return innermost_tensor_type(type_proto.optional_type.elem_type)
    return None


def element_name(name: str, k: int) -> str:
    """The graph input or output holding element k of sequence `name`."""
    return f"{name}.{k}"


# -- graph inputs and outputs ----------------------------------------------------------------
def structured_input(ctx, vi):
    """The importer's value for graph input `vi` whose type is a sequence or optional,
    its structure from `ctx.structure` (see the module doc)."""
    return _structured(ctx, vi.name, vi.type, ctx.structure.get(vi.name, _MISSING))


_MISSING = object()


def _structured(ctx, name: str, type_proto, spec):
    kind = type_proto.WhichOneof("value")
    if kind == "optional_type":
        if spec is None:
            return ctx.absent_value()
        return _structured(ctx, name, type_proto.optional_type.elem_type, spec)
    if kind == "tensor_type":
        return ctx.tensor_value(_tensor_input(ctx, name, type_proto.tensor_type, None, ""))
    if kind != "sequence_type":
        raise GraphError(f"input {name!r} has type {kind or 'none'}, which mdsl cannot import")
    elem = type_proto.sequence_type.elem_type
    if elem.WhichOneof("value") != "tensor_type":
        raise GraphError(f"input {name!r}: mdsl imports sequences of tensors only")
    if spec is _MISSING or spec is None:
        raise GraphError(
            f"input {name!r} is a sequence: mdsl fixes its length at import; pass it as "
            f"load(model, structure={{{name!r}: length}})"
        )
    shapes = [None] * int(spec) if isinstance(spec, (int, np.integer)) else list(spec)
    if not 0 <= len(shapes) <= UNROLL_LIMIT:
        raise GraphError(f"input {name!r}: a sequence of 0 to {UNROLL_LIMIT} tensors")
    return ctx.sequence_value(
        [_tensor_input(ctx, name, elem.tensor_type, shape, k) for k, shape in enumerate(shapes)]
    )


def _tensor_input(ctx, name: str, tt, shape, k):
    """A graph input for a tensor (k: "" for the value itself, else its element index)."""
    from mdsl.frontends.onnx_import import mdsl_name

    dtype = dtype_from_onnx(tt.elem_type)
    if dtype is None:
        raise GraphError(f"input {name!r}: element type {tt.elem_type} is not an mdsl dtype")
    own = "" if k == "" else f"_{k}"
    if shape is None:
        dims = ctx.input_shape(name, tt, own, _tensor_params(ctx))
    else:
        dims = tuple(
            ctx.symbol(f"{name}{own}_{axis}")
            if d is None
            else (ctx.symbol(d + own) if isinstance(d, str) else int(d))
            for axis, d in enumerate(shape)
        )
    label = mdsl_name(name) if k == "" else element_name(mdsl_name(name), k)
    return ctx.current_graph().input(label, dims, dtype)


def _tensor_params(ctx) -> frozenset:
    """The dim params the graph's tensor inputs declare: a sequence element naming one
    has that size (one size across the model), not a size of its own."""
    return frozenset(
        d.dim_param
        for vi in ctx.proto.graph.input
        if vi.type.WhichOneof("value") == "tensor_type"
        for d in vi.type.tensor_type.shape.dim
        if d.HasField("dim_param")
    )


def structure_of(feeds: Mapping, names) -> dict:
    """`structure=` for `load` from example feeds of the inputs `names`: a list (a
    sequence) gives its elements' ranks, None (an absent optional) None; tensors need
    nothing."""
    out = {}
    for name in names:
        if name not in feeds:
            continue
        value = feeds[name]
        if value is None:
            out[name] = None
        elif isinstance(value, (list, tuple)):
            out[name] = [(None,) * np.ndim(v) for v in value]
    return out


def flatten_feeds(feeds: Mapping) -> dict:
    """Feeds for a graph imported with sequences: a list becomes its elements (`x.0`,
    ...), None (an absent optional) nothing; arrays stay."""
    out = {}
    for name, value in feeds.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            out.update({element_name(name, k): v for k, v in enumerate(value)})
        else:
            out[name] = value
    return out


def pack_outputs(outputs: Mapping, sequence_names) -> dict:
    """Outputs with sequence outputs `sequence_names` regrouped into lists (in element
    order; an empty sequence is []); other outputs stay."""
    out = dict(outputs)
    for name in sequence_names:
        pattern = re.compile(re.escape(name) + r"\.(\d+)")
        found = {int(m.group(1)): k for k in outputs if (m := pattern.fullmatch(k))}
        for k in found.values():
            out.pop(k)
        out[name] = [outputs[found[i]] for i in sorted(found)]
    return out


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


@rule("SequenceInsert", constant_inputs=(2,))
def sequence_insert(ctx, node) -> list:
    items = list(ctx.sequence_of(node.inputs[0]))
    items.insert(_position(ctx, node, 2, len(items), insert=True), ctx.tensor(node.inputs[1]))
    return [ctx.sequence_value(items)]


@rule("SequenceErase", constant_inputs=(1,))
def sequence_erase(ctx, node) -> list:
    items = list(ctx.sequence_of(node.inputs[0]))
    if not items:
        raise GraphError("SequenceErase of an empty sequence")
    del items[_position(ctx, node, 1, len(items), insert=False)]
    return [ctx.sequence_value(items)]


@rule("SequenceAt", constant_inputs=(1,))
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


@rule("SplitToSequence", constant_inputs=(1,))
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


# -- optionals ------------------------------------------------------------------------------
@rule("Optional")
def optional(ctx, node) -> list:
    """Optional(x) holds x; Optional() (with attr `type`) is absent."""
    return [ctx.entry(node.inputs[0]) if node.inputs and node.inputs[0] else ctx.absent_value()]


@rule("OptionalHasElement")
def optional_has_element(ctx, node) -> list:
    present = bool(node.inputs and node.inputs[0]) and not ctx.entry(node.inputs[0]).absent
    return [ctx.constant_value(np.array(present))]


@rule("OptionalGetElement")
def optional_get_element(ctx, node) -> list:
    value = ctx.entry(node.inputs[0]) if node.inputs and node.inputs[0] else ctx.absent_value()
    if value.absent:
        raise GraphError("OptionalGetElement of an optional that is absent (known at import)")
    return [value]


@rule("Identity")
def identity(ctx, node) -> list:
    """Identity of a tensor, or of a sequence or optional (the same value)."""
    value = ctx.entry(node.inputs[0])
    if value.sequence is not None or value.absent:
        return [value]
    with ctx.scope_of(node) as leaf:
        return ctx.emit("Identity", [ctx.tensor(node.inputs[0])], {}, name=leaf)


# -- unrolled at import ----------------------------------------------------------------------
@rule("SequenceMap")
def sequence_map(ctx, node) -> list:
    """The body once per element of the sequences (tensor inputs passed whole); each body
    output becomes a sequence."""
    values = [ctx.entry(name) for name in node.inputs]
    lengths = {len(v.sequence) for v in values if v.sequence is not None}
    if len(lengths) != 1:
        raise GraphError(f"SequenceMap over sequences of different lengths {sorted(lengths)}")
    (length,) = lengths
    body = node.attrs["body"]
    results: list[list] = [[] for _ in body.output]
    with ctx.scope_of(node, composite=True):
        for k in range(length):
            args = [v if v.sequence is None else ctx.tensor_value(v.sequence[k]) for v in values]
            for out, value in zip(results, ctx.import_values(body, args)):
                out.append(ctx.settled_tensor(value))
    return [ctx.sequence_value(items) for items in results]


def holds_structure(ctx, name: str) -> bool:
    """Whether value `name` is a sequence or an optional that is absent."""
    if not name:
        return False
    value = ctx.entry(name)
    return value.sequence is not None or value.absent


def unrolled_loop(ctx, node) -> list:
    """A Loop carrying a sequence or optional, unrolled at import: its trip count and
    condition (initial, and after each iteration) must be import-time values. Scan
    outputs are stacked."""
    body = node.attrs["body"]
    trip = ctx.value(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if node.inputs and node.inputs[0] and (trip is None or trip.dtype == object):
        raise GraphError(
            "a Loop carrying a sequence or optional is unrolled at import: its trip count "
            "must be known then"
        )
    count = UNROLL_LIMIT + 1 if trip is None else max(int(np.asarray(trip).reshape(-1)[0]), 0)
    go = _known_condition(
        ctx, ctx.entry(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    )
    state = [ctx.entry(name) for name in node.inputs[2:]]
    scans: list[list] = [[] for _ in range(len(body.output) - 1 - len(state))]
    i = 0
    with ctx.scope_of(node, composite=True):
        while go and i < count:
            if i == UNROLL_LIMIT:
                raise GraphError(f"a Loop unrolled at import runs at most {UNROLL_LIMIT} times")
            args = [ctx.constant_value(np.array(i, np.int64)), ctx.constant_value(np.array(True))]
            results = ctx.import_values(body, [*args, *state])
            go = _known_condition(ctx, results[0])
            state = results[1 : 1 + len(state)]
            for out, value in zip(scans, results[1 + len(state) :]):
                out.append(ctx.settled_tensor(value))
            i += 1
        stacked = []
        for rows in scans:
            if not rows:
                raise GraphError(
                    "a Loop unrolled at import ran no iteration: its scan outputs have no type"
                )
            pieces = [emit1(ctx, "Unsqueeze", r, axes=(0,)) for r in rows]
            stacked.append(emit1(ctx, "Concat", *pieces, axis=0) if len(pieces) > 1 else pieces[0])
    return [*state, *[ctx.tensor_value(t) for t in stacked]]


def _known_condition(ctx, value) -> bool:
    if value is None:
        return True
    if value.const is None:
        raise GraphError(
            "a Loop carrying a sequence or optional is unrolled at import: its condition "
            "must be known then"
        )
    return bool(np.asarray(value.const).reshape(-1)[0])


def structured_if(ctx, node, branches) -> list:
    """An If (condition known only at run time) whose results include sequences or
    optionals: both branches must give them one structure (equal lengths; an optional
    present in both or absent in both), fixed at import; the If selects the tensors."""
    from mdsl.builder.control_flow import cond, result_types

    structures: list[list] = []

    def branch_fn(branch):
        def run():
            values = ctx.import_values(branch, [])
            structures.append([_structure(v) for v in values])
            tensors = []
            for v in values:
                if v.sequence is not None:
                    tensors += v.sequence
                elif not v.absent:
                    tensors.append(ctx.settled_tensor(v))
            if not tensors:  # all absent or empty: the If selects nothing (a placeholder)
                tensors.append(ctx.current_graph().const("nothing", np.bool_(False)))
            return tuple(tensors)

        return run

    pred = ctx.input_tensor(node, 0)
    with ctx.control_flow_scope(node, "If") as name:
        then_fn, else_fn = (branch_fn(b) for b in branches)
        for k, fn in enumerate((then_fn, else_fn)):  # the structures, before the If is built
            result_types(fn, [], f"{name}_probe{k}")
        if structures[0] != structures[1]:
            raise GraphError(
                f"If branches give results of different structures ({_shown(structures[0])} "
                f"vs {_shown(structures[1])}); mdsl fixes sequence lengths and whether an "
                "optional holds a value at import, so both branches must agree"
            )
        result = cond(pred, then_fn, else_fn, name=name)
    flat = list(result) if isinstance(result, tuple) else [result]
    out, k = [], 0
    for kind in structures[0]:
        if kind == "absent":
            out.append(ctx.absent_value())
        elif kind == "tensor":
            out.append(ctx.tensor_value(flat[k]))
            k += 1
        else:
            out.append(ctx.sequence_value(flat[k : k + kind]))
            k += kind
    return out


def _structure(value):
    if value.sequence is not None:
        return len(value.sequence)
    return "absent" if value.absent else "tensor"


def _shown(structure: list) -> str:
    return ", ".join(
        f"a sequence of {s} tensors"
        if isinstance(s, int)
        else ("an absent optional" if s == "absent" else "a tensor")
        for s in structure
    )
