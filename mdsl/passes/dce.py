"""Dead code elimination: keep only what the graph outputs need.

The roots are the Output nodes and the ValueDims nodes (the symbols they bind are read
by attributes, not edges); a node is live if a live node (or a control-flow
subgraph of one) reads one of its outputs. Inputs always stay: they are the graph's
calling convention. Subgraphs are cleaned the same way, from their own Output nodes.
"""

from __future__ import annotations

from mdsl.ir.graph import INPUT, OUTPUT, Graph
from mdsl.ops.runtime_sizes import is_value_binder
from mdsl.passes.manager import PassResult, register


@register("dce", levels=(1, 2, 3), phase="cleanup")
def dce(g: Graph) -> PassResult:
    """Remove nodes no graph output depends on (in subgraphs too).

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (2,))
    ...     unused = mdsl.ops.exp(x)
    ...     g.output(x + 1.0, "y")
    >>> [n.op_type for n in mdsl.passes.run(g, ["dce"]).nodes]
    ['Input', 'Const', 'Add', 'Output']
    """
    live: set[int] = set()
    removed = _sweep(g, live)
    return PassResult(g, removed > 0, f"removed {removed} dead node(s)")


def _sweep(g: Graph, live: set[int]) -> int:
    """Mark live nodes of `g` walking backwards, drop the rest; returns how many were
    dropped here and in subgraphs. Marks reach outer graphs' producers through `live`."""
    removed = 0
    for node in reversed(g.nodes):
        if node.op_type in (INPUT, OUTPUT) or is_value_binder(node):
            live.add(id(node))
        if id(node) not in live:
            continue
        for t in node.inputs:
            if t is not None:
                live.add(id(t.producer))
        for sub in node.subgraphs.values():
            removed += _sweep(sub, live)
    kept = [n for n in g if id(n) in live]
    if len(kept) != len(g):
        removed += len(g) - len(kept)
        g.replace_nodes(kept)
    return removed
