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
    const_keys = _const_keys(g)
    seen: dict[tuple, Node] = {}
    duplicates: set[int] = set()
    for node in g.nodes:
        if node.op_type in (INPUT, OUTPUT):
            continue
        key = const_keys.get(id(node)) if node.op_type == CONST else _node_key(node)
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


def _node_key(node: Node) -> tuple:
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


def _const_keys(g: Graph) -> dict[int, tuple]:
    """The CSE key of each constant that may have a twin (id(node) -> key).

    Hashing every weight's bytes on every CSE round cost seconds for BERT-base (85M
    weights, twelve layers of equal shapes), so bytes are hashed only for constants that
    agree on dtype, shape, device and a sample of their values; a graph of distinct
    weights hashes a few KiB each.
    """
    by_kind: dict[tuple, list[Node]] = {}
    for node in g:
        if node.op_type == CONST:
            by_kind.setdefault(_const_kind(node), []).append(node)
    keys: dict[int, tuple] = {}
    for kind, nodes in by_kind.items():
        if len(nodes) < 2:
            continue
        by_sample: dict[tuple, list[Node]] = {}
        for node in nodes:
            by_sample.setdefault(_sample_key(node.attrs["value"]), []).append(node)
        for sample, twins in by_sample.items():
            if len(twins) < 2:
                continue
            for node in twins:
                keys[id(node)] = (CONST, kind, sample, _full_key(node.attrs["value"]))
    return keys


def _sample_key(value) -> tuple:
    """Equal for equal constants; cheap: a parameter's record, or a few KiB of an array."""
    if isinstance(value, ParamInit):
        if value.kind in ("zeros", "ones"):  # the same array, whatever the seed
            return ("init", value.kind)
        return ("init", value)
    flat = np.asarray(value).reshape(-1)  # a view for the contiguous arrays constants are
    step = max(1, flat.size // SAMPLE_VALUES)
    sample = np.ascontiguousarray(flat[::step][:SAMPLE_VALUES]).tobytes()
    return ("sample", flat.size, hashlib.blake2b(sample, digest_size=16).hexdigest())


def _full_key(value) -> tuple:
    return ("init",) if isinstance(value, ParamInit) else _content_digest(value)


SAMPLE_VALUES = 1024


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
