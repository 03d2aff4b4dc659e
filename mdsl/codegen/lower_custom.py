"""Lowering a node bound to a user C function (a "c" binding) to one `kir.CustomCall`
kernel: its buffers, static shapes, attrs as doubles, and the entry point's name (a
`source=` entry point is renamed per source text so two ops may share a symbol)."""

from __future__ import annotations

import hashlib
import math

from mdsl.codegen import kir
from mdsl.ir.dim import Dim
from mdsl.ir.errors import CompileError
from mdsl.ir.graph import Node
from mdsl.ops.dynamic import data_dependent_spec, dynamic_bounds


def c_binding(node: Node):
    """The node's "c" binding, or None."""
    from mdsl.ops.bindings import get_binding

    return get_binding(node.op_type, "c")


def lower_custom_call(ctx, node: Node, failure=None) -> kir.CustomCall:
    """The kernel calling the node's C function on its buffers. A data-dependent node's
    outputs are passed at their sizes' bounds, and the function reports each size
    (`kir.DataSize`); `failure(message)` registers the check of a reported size."""
    binding = c_binding(node)
    options = binding.options
    symbol, source = options["symbol"], options.get("source")
    function = symbol if source is None else _renamed(symbol, source)
    bounds = {s: b for s, b in dynamic_bounds(node).items() if b is not None}
    output_types = [(t.dtype, _shape(t, bounds)) for t in node.outputs]
    return kir.CustomCall(
        ctx.fresh("k") + "_c_" + symbol.lower()[:20],
        [kir.NodeRef(node.name, node.op_type, node.source)],
        function,
        symbol,
        source,
        options.get("library"),
        [None if t is None else ctx.buffer_of(t) for t in node.inputs],
        [ctx.buffer_of(t) for t in node.outputs],
        [None if t is None else (t.dtype, _shape(t)) for t in node.inputs],
        output_types,
        attr_values(node),
        _data_sizes(node, bounds, failure),
    )


def lower_source_call(ctx, node: Node, source: str, symbol: str, attrs: tuple) -> kir.CustomCall:
    """A call of C function `symbol` of `source` (mdsl's own C forms: the same calling
    convention as a "c" binding, with attrs the lowering chose)."""
    return kir.CustomCall(
        ctx.fresh("k") + "_c_" + symbol.lower()[:20],
        [kir.NodeRef(node.name, node.op_type, node.source)],
        _renamed(symbol, source),
        symbol,
        source,
        None,
        [None if t is None else ctx.buffer_of(t) for t in node.inputs],
        [ctx.buffer_of(t) for t in node.outputs],
        [None if t is None else (t.dtype, _shape(t)) for t in node.inputs],
        [(t.dtype, _shape(t)) for t in node.outputs],
        attrs,
    )


def _renamed(symbol: str, source: str) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()[:10]
    return f"mdsl_cop_{digest}_{symbol}"


def _shape(t, bounds=None) -> tuple:
    """The tensor's sizes (ints or Dims), a data-dependent symbol at its bound."""
    shape = tuple(t.type.storage_shape)
    if not bounds:
        return shape
    return tuple(bounds.get(d.name, d) if _bare_symbol(d) else d for d in shape)


def _bare_symbol(d) -> bool:
    return isinstance(d, Dim) and d.name is not None


def _data_sizes(node: Node, bounds: dict, failure) -> tuple[kir.DataSize, ...]:
    """Where the function reports each data-dependent size: the first output axis that
    holds its symbol bare."""
    sizes = []
    for name, bound in bounds.items():
        where = [
            (i, axis)
            for i, t in enumerate(node.outputs)
            for axis, d in enumerate(t.type.storage_shape)
            if _bare_symbol(d) and d.name == name
        ]
        if not where:
            raise CompileError(
                f"data-dependent size {name} is no output's dim: a C function cannot report it",
                node=node.name,
                op_type=node.op_type,
            )
        output, axis = where[0]
        spec = data_dependent_spec(node.op_type)
        why = f": {spec.invalid}" if spec is not None and spec.invalid else ""
        message = (
            f"output {node.outputs[output].name} has {{value}} entries along axis {axis}, "
            f"outside [0, {bound}] (the op's bound){why}"
        )
        sizes.append(kir.DataSize(Dim(name), output, axis, bound, failure(message)))
    return tuple(sizes)


def attr_values(node: Node) -> tuple[float, ...]:
    """The doubles a C function gets as `attrs`: each attr in prototype order, then each
    list-of-numbers attr (`[int]`, `[float]`) as its length and its elements (length -1
    for an absent list), in prototype order too."""
    attrs = _ordered_attrs(node)
    scalars = [_attr_value(v, spec and spec.choices) for v, spec in attrs]
    lists = []
    for value, spec in attrs:
        if spec is not None and spec.kind in ("list[int]", "list[float]"):
            lists += [-1.0] if value is None else [float(len(value)), *map(_list_item, value)]
    return tuple(scalars + lists)


def _list_item(value) -> float:
    return float(value) if isinstance(value, (bool, int, float)) else math.nan


def _ordered_attrs(node: Node) -> list[tuple]:
    """(value, Attr spec or None) of each attr, in prototype order."""
    from mdsl.ops.registry import get_op, has_op

    if not has_op(node.op_type):
        return [(node.attrs.get(n), None) for n in sorted(node.attrs)]
    return [(node.attrs.get(n), spec) for n, spec in get_op(node.op_type).attrs.items()]


def _attr_value(value, choices=None) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str) and choices and value in choices:
        return float(choices.index(value))  # a str attr with choices: its choice index
    return math.nan
