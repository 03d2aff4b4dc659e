"""Constant folding: evaluate at compile time what depends only on constants.

A node whose inputs are all constants is run through its op's "python" binding (the
same numpy code the interpreter runs) and replaced by a Const holding the result, under
the same name. Shapes count as constants where they are static: `Shape` (and `Size`)
of a tensor whose selected dims are known folds, and so does a `Gather` picking known
dims out of a `Shape`. Results over `MAX_FOLDED_ELEMENTS` elements are left to run
time (folding `Expand` of a scalar to a huge tensor would only bloat the graph), and
so are nodes over `MAX_FOLDED_FLOPS` (`mdsl.passes.cost`: a chain of big constant
MatMuls must not keep compilation busy for minutes), as are
ops marked stateful/random in their OpDef (`extra["stateful"] = True`) and nodes whose
binding raises (the interpreter will report it where it runs).

Reshape, Expand, Slice and Tile hold their targets as attrs (not tensor inputs as in
ONNX), so a shape computed from constants reaches them through the ONNX importer, which
folds it into the attr; here only value computations on shapes remain to fold.
"""

from __future__ import annotations

import math

import numpy as np

from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import all_graphs, mark_changed, use_map
from mdsl.ops.bindings import get_binding
from mdsl.ops.registry import RANDOM_OPS, get_op, has_op
from mdsl.passes.cost import CostModel
from mdsl.passes.manager import PassResult, register

MAX_FOLDED_ELEMENTS = 1 << 20
MAX_FOLDED_FLOPS = 1 << 26


@register("fold_constants", levels=(1, 2, 3), phase="cleanup")
def fold_constants(g: Graph) -> PassResult:
    """Replace nodes computing constants by Const nodes (in subgraphs too).

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (2,))
    ...     g.output(x * (g.const("a", 3.0) + 1.0), "y")
    >>> g2 = mdsl.passes.run(g, ["fold_constants", "dce"])
    >>> [n.op_type for n in g2.nodes], float(g2.node("Add").const_value())
    (['Input', 'Const', 'Mul', 'Output'], 4.0)
    """
    folded = sum(_fold_graph(sub) for sub in list(all_graphs(g)))
    return PassResult(g, folded > 0, f"folded {folded} node(s) into constants")


def _fold_graph(g: Graph) -> int:
    uses = use_map(g)
    order: list[Node] = []
    folded = 0
    cost = CostModel(g)
    for node in g.nodes:
        values = folded_values(node, cost)
        if values is None:
            order.append(node)
            continue
        consts = _const_nodes(g, node, values)
        for old, new in zip(node.outputs, consts):
            for reader, i in uses.pop(old, []):
                reader.inputs[i] = new.outputs[0]
                uses.setdefault(new.outputs[0], []).append((reader, i))
        order += consts
        folded += 1
    if folded:
        g.replace_nodes(order)
        for sub in all_graphs(g):
            mark_changed(sub)
    return folded


def folded_values(node: Node, cost: CostModel | None = None) -> list[np.ndarray] | None:
    """The values of `node`'s outputs if they can be computed now, else None (`cost`:
    the cost model of its graph, when the caller has one)."""
    if node.op_type in (INPUT, OUTPUT, CONST) or node.subgraphs or not _small(node):
        return None
    if node.op_type in ("Shape", "Size", "Gather"):
        static = _static_shape_value(node)
        if static is not None:
            return [static]
    if not all(t is None or t.producer.op_type == CONST for t in node.inputs):
        return None
    if node.op_type in RANDOM_OPS or not has_op(node.op_type):
        return None
    if get_op(node.op_type).extra.get("stateful"):
        return None
    if (cost or CostModel(node.graph)).node(node).flops > MAX_FOLDED_FLOPS:
        return None
    return _evaluate(node)


def _small(node: Node) -> bool:
    total = 0
    for t in node.outputs:
        if not t.type.is_static:
            return False
        total += math.prod(t.shape)
    return total <= MAX_FOLDED_ELEMENTS


def _evaluate(node: Node) -> list[np.ndarray] | None:
    binding = get_binding(node.op_type, "python")
    if binding is None or binding.fn is None:
        return None
    args = [None if t is None else t.producer.const_value() for t in node.inputs]
    try:
        with np.errstate(all="ignore"):
            result = binding.fn(*args, **node.attrs)
    except Exception:  # left for run time, where the interpreter reports it with context
        return None
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    values = [np.asarray(v) for v in values]
    if len(values) != len(node.outputs):
        return None
    for v, t in zip(values, node.outputs):
        if v.dtype != t.dtype.np or tuple(v.shape) != t.shape:
            return None
    return values


def _static_shape_value(node: Node) -> np.ndarray | None:
    """Shape/Size of statically known dims, or Gather of known entries of a Shape."""
    if node.op_type == "Shape":
        x = node.inputs[0]
        dims = x.shape[node.attrs.get("start", 0) : node.attrs.get("end")]
        return _int64(dims)
    if node.op_type == "Size":
        x = node.inputs[0]
        return _int64(math.prod(x.shape)) if x.type.is_static else None
    data, indices = node.inputs[0], node.inputs[1]
    if data.producer.op_type != "Shape" or indices.producer.op_type != CONST:
        return None
    if node.attrs.get("axis", 0) not in (0, -1):
        return None
    shape_node = data.producer
    dims = shape_node.inputs[0].shape[
        shape_node.attrs.get("start", 0) : shape_node.attrs.get("end")
    ]
    idx = indices.producer.const_value()
    if idx.size and not (-len(dims) <= idx.min() and idx.max() < len(dims)):
        return None
    picked = [dims[int(i)] for i in idx.reshape(-1)]
    value = _int64(picked)
    return None if value is None else value.reshape(idx.shape)


def _int64(dims) -> np.ndarray | None:
    if isinstance(dims, (list, tuple)):
        if not all(isinstance(d, int) for d in dims):
            return None
        return np.array(dims, dtype=np.int64)
    return np.array(dims, dtype=np.int64) if isinstance(dims, int) else None


def _const_nodes(g: Graph, node: Node, values: list[np.ndarray]) -> list[Node]:
    """Const nodes for `values`; the first takes `node`'s name (it leaves the graph)."""
    consts = []
    for i, value in enumerate(values):
        value = np.array(value)  # an owned copy: a binding may return a view of its input
        value.setflags(write=False)
        name = node.name if i == 0 else g.node_names.unique(f"{node.name}_{i}")
        const = Node(
            name,
            CONST,
            [],
            {"value": value},
            layer=node.layer,
            source=node.source,
            device=node.device,
        )
        const.outputs = [Tensor(node.outputs[i].type, const, 0)]  # format kept too
        consts.append(const)
    return consts
