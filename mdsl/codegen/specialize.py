"""Specialization: a copy of a graph with every symbolic dim replaced by its value.

Code is generated for static shapes; an executable specializes its graph for each shape
signature it meets (and caches the result).
"""

from __future__ import annotations

from mdsl.ir.dim import evaluate_dims
from mdsl.ir.errors import ShapeError
from mdsl.ir.graph import Graph
from mdsl.ir.rewrite import all_graphs, clone_graph
from mdsl.ir.tensor_type import TensorType


def specialize(g: Graph, symbols: dict[str, int]) -> Graph:
    """A clone of `g` whose tensor types and attrs hold ints only, except dims known only
    at run time (a control-flow node's dynamic dims), which `build_plan` refuses."""
    static = clone_graph(g)
    for sub in all_graphs(static):
        for node in sub:
            node.attrs = {k: _evaluated(v, symbols) for k, v in node.attrs.items()}
            for t in node.outputs:
                if not t.type.is_static:
                    shape = tuple(_evaluated(d, symbols) for d in t.type.shape)
                    t.type = TensorType(shape, t.type.dtype, t.type.format, t.type.storage_format)
    return static


def _evaluated(value, symbols: dict[str, int]):
    try:
        return evaluate_dims(value, symbols)
    except ShapeError:  # a symbol no input binds: left for the run-time check to report
        return value
