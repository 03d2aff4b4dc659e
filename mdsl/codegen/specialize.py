"""Specialization: a copy of a graph with symbolic dims replaced by their values.

A static variant (`mdsl.compile(g, specialize=...)`, or a graph whose kernels cannot
be generated symbolically) is generated from the graph specialized for every symbol;
binding only some symbols leaves the others symbolic (`2*N*S` with N = 4 becomes `8*S`).
"""

from __future__ import annotations

from mdsl.codegen.dims import substitute
from mdsl.ir.dim import Dim, evaluate_dims
from mdsl.ir.errors import ShapeError
from mdsl.ir.graph import Graph
from mdsl.ir.rewrite import all_graphs, clone_graph
from mdsl.ir.tensor_type import TensorType


def specialize(g: Graph, symbols: dict[str, int]) -> Graph:
    """A clone of `g` with the symbols in `symbols` replaced by their values in tensor
    types and attrs; other symbols (unbound ones, a control-flow node's dynamic dims)
    stay in the expressions.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", "S", 4))
    ...     g.output(x.reshape(-1, 4), "y")
    >>> specialize(g, {"N": 2}).outputs["y"].shape
    (Dim('2*S'), 4)
    """
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
    except ShapeError:  # some symbols unbound: substitute the bound ones
        return _substituted(value, symbols)


def _substituted(value, symbols: dict[str, int]):
    if isinstance(value, Dim):
        return substitute(value, symbols)
    if isinstance(value, (tuple, list)):
        return type(value)(_substituted(v, symbols) for v in value)
    return value
