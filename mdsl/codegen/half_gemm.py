"""Half-float matrix products (float16, bfloat16) as float32 GEMMs, for targets whose
GEMMs are BLAS calls (float32 and float64 only).

`half_matmuls_in_float32(g)` rewrites each such MatMul as Cast(MatMul(Cast(a), Cast(b)))
in float32, which is what the MatMul reference computes (`computes_in_float32`: widen,
multiply and accumulate in float32, round once), so the C target runs it as generated
code instead of calling back into numpy. A fusion group holding the MatMul is dissolved
(its members become kernels of their own). The graph of a target that multiplies half
floats natively (AscendC's cube unit) is left alone: only the C target's planner calls it.

>>> import mdsl
>>> with mdsl.Graph("half") as g:
...     a, b = g.input("a", (4, 8), "float16"), g.input("b", (8, 2), "float16")
...     g.output(mdsl.ops.matmul(a, b), "y")
>>> [(n.op_type, n.outputs[0].dtype.name) for n in half_matmuls_in_float32(g) if n.op_type in ("Cast", "MatMul")]
[('Cast', 'float32'), ('Cast', 'float32'), ('MatMul', 'float32'), ('Cast', 'float16')]
"""

from __future__ import annotations

from mdsl import ops
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Graph, Node
from mdsl.ir.rewrite import all_graphs, clone_graph
from mdsl.passes.pattern import Rewriter

HALF_FLOATS = (DType.float16, DType.bfloat16)


def _is_half_matmul(node: Node) -> bool:
    return node.op_type == "MatMul" and node.outputs[0].dtype in HALF_FLOATS


def half_matmuls_in_float32(g: Graph) -> Graph:
    """`g`, or a copy of it with its half-float MatMuls in float32 (module doc)."""
    if not any(_is_half_matmul(n) for sub in all_graphs(g) for n in sub):
        return g
    g = clone_graph(g)
    for sub in list(all_graphs(g)):
        groups = {n.fusion_group for n in sub if _is_half_matmul(n) and n.fusion_group}
        for node in sub:
            if node.fusion_group in groups:
                node.fusion_group = None
        Rewriter(sub).sweep(_widen)
    return g


def _widen(node: Node, rw: Rewriter) -> None:
    if not _is_half_matmul(node):
        return
    dtype = node.outputs[0].dtype

    def build():
        a, b = (ops.cast(t, to=DType.float32) for t in node.inputs)
        return ops.cast(ops.matmul(a, b), to=dtype)

    rw.try_replace(node, build)
