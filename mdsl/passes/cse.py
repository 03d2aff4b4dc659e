"""Common subexpression elimination.

Two nodes are the same computation when they have the same op type, read the same
tensors (either order for commutative ops), have equal attrs, sit on the same device
and fusion group, and hold identical control-flow subgraphs (if any). Constants are the
same when their dtype, shape and bytes are equal, whatever their names. The first node
of each class survives; readers of the others are rewired to it.
"""

from __future__ import annotations

import hashlib

import numpy as np

from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.initializer import ParamInit
from mdsl.ir.rewrite import all_graphs, attr_key, mark_changed, use_map
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import COMMUTATIVE


@register("cse", levels=(1, 2, 3), phase="cleanup")
def cse(g: Graph) -> PassResult:
    """Merge nodes computing the same value (in subgraphs too).

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (2,))
    ...     g.output(mdsl.ops.exp(x) + mdsl.ops.exp(x), "y")
    >>> [n.op_type for n in mdsl.passes.run(g, ["cse"]).nodes]
    ['Input', 'Exp', 'Add', 'Output']
    """
    merged = sum(_cse_graph(sub) for sub in list(all_graphs(g)))
    return PassResult(g, merged > 0, f"merged {merged} duplicate node(s)")


def _cse_graph(g: Graph) -> int:
    uses = use_map(g)
    shared_const_kinds = _shared_const_kinds(g)
    seen: dict[tuple, Node] = {}
    duplicates: set[int] = set()
    for node in g.nodes:
        if node.op_type in (INPUT, OUTPUT):
            continue
        key = _node_key(node, shared_const_kinds)
        if key is None:
            continue
        kept = seen.setdefault(key, node)
        if kept is node:
            continue
        for old, new in zip(node.outputs, kept.outputs):
            _rewire(uses, old, new)
        duplicates.add(id(node))
    if duplicates:
        g.replace_nodes([n for n in g if id(n) not in duplicates])
        for sub in all_graphs(g):
            mark_changed(sub)
    return len(duplicates)


def _rewire(uses: dict, old: Tensor, new: Tensor) -> None:
    for reader, i in uses.pop(old, []):
        reader.inputs[i] = new
        uses.setdefault(new, []).append((reader, i))


def _node_key(node: Node, shared_const_kinds: set) -> tuple | None:
    if node.op_type == CONST:
        return _const_key(node, shared_const_kinds)
    inputs = [None if t is None else (id(t.producer), t.index) for t in node.inputs]
    if node.op_type in COMMUTATIVE and len(inputs) == 2 and None not in inputs:
        inputs.sort()
    return (
        node.op_type,
        tuple(inputs),
        attr_key(node.attrs),
        node.device,
        node.fusion_group,
        tuple((k, _graph_fingerprint(s)) for k, s in sorted(node.subgraphs.items())),
    )


def _const_kind(node: Node) -> tuple:
    t = node.outputs[0].type
    return (t.dtype, t.shape, node.device)


def _shared_const_kinds(g: Graph) -> set:
    """(dtype, shape, device) of constants that have a twin candidate: only those are
    hashed, so a graph of distinct weights costs no hashing."""
    counts: dict[tuple, int] = {}
    for node in g:
        if node.op_type == CONST:
            kind = _const_kind(node)
            counts[kind] = counts.get(kind, 0) + 1
    return {k for k, c in counts.items() if c > 1}


def _const_key(node: Node, shared_const_kinds: set) -> tuple | None:
    kind = _const_kind(node)
    if kind not in shared_const_kinds:
        return None
    value = node.attrs["value"]
    if isinstance(value, ParamInit):
        if value.kind in ("zeros", "ones"):  # the same array, whatever the seed
            return (CONST, kind, value.kind)
        return (CONST, kind, "init", value)
    return (CONST, kind, _content_digest(value))


def _content_digest(array: np.ndarray) -> tuple:
    data = np.ascontiguousarray(array).tobytes()
    return ("bytes", len(data), hashlib.blake2b(data, digest_size=16).hexdigest())


def _graph_fingerprint(g: Graph) -> tuple:
    """A structural key of a subgraph: equal keys mean identical computations."""
    position = {}
    rows = []
    for i, node in enumerate(g):
        for t in node.outputs:
            position[t] = (i, t.index)
        ins = tuple(
            None if t is None else ("in", position[t]) if t in position else ("out", id(t))
            for t in node.inputs
        )
        attrs = attr_key({k: _const_attr(v) for k, v in node.attrs.items()})
        types = tuple((t.shape, t.dtype) for t in node.outputs)
        subs = tuple((k, _graph_fingerprint(s)) for k, s in sorted(node.subgraphs.items()))
        name = node.name if node.op_type in (INPUT, OUTPUT) else None
        rows.append((node.op_type, name, ins, attrs, types, subs))
    return tuple(rows)


def _const_attr(value):
    return _content_digest(value) if isinstance(value, np.ndarray) else value
