"""Lowering a node bound to a user C function (a "c" binding) to one `kir.CustomCall`
kernel: its buffers, static shapes, attrs as doubles, and the entry point's name (a
`source=` entry point is renamed per source text so two ops may share a symbol)."""

from __future__ import annotations

import hashlib
import math

from mdsl.codegen import kir
from mdsl.ir.graph import Node


def c_binding(node: Node):
    """The node's "c" binding, or None."""
    from mdsl.ops.bindings import get_binding

    return get_binding(node.op_type, "c")


def lower_custom_call(ctx, node: Node) -> kir.CustomCall:
    """The kernel calling the node's C function on its buffers."""
    binding = c_binding(node)
    options = binding.options
    symbol, source = options["symbol"], options.get("source")
    function = symbol if source is None else _renamed(symbol, source)
    return kir.CustomCall(
        ctx.fresh("k") + "_c_" + symbol.lower()[:20],
        [kir.NodeRef(node.name, node.op_type, node.source)],
        function,
        symbol,
        source,
        options.get("library"),
        [None if t is None else ctx.buffer_of(t) for t in node.inputs],
        [ctx.buffer_of(t) for t in node.outputs],
        [None if t is None else (t.dtype, _static_shape(t)) for t in node.inputs],
        [(t.dtype, _static_shape(t)) for t in node.outputs],
        tuple(_attr_value(v, choices) for v, choices in _ordered_attrs(node)),
    )


def _renamed(symbol: str, source: str) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()[:10]
    return f"mdsl_cop_{digest}_{symbol}"


def _static_shape(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.type.storage_shape)


def _ordered_attrs(node: Node) -> list[tuple]:
    """(value, choices or None) of each attr, in prototype order."""
    from mdsl.ops.registry import get_op, has_op

    if not has_op(node.op_type):
        return [(node.attrs.get(n), None) for n in sorted(node.attrs)]
    return [(node.attrs.get(n), spec.choices) for n, spec in get_op(node.op_type).attrs.items()]


def _attr_value(value, choices=None) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str) and choices and value in choices:
        return float(choices.index(value))  # a str attr with choices: its choice index
    return math.nan
