"""Cutting a graph into standalone pieces (device partitions, pipeline stages).

Given which piece each node belongs to, `split_graph` moves the nodes of each piece into a
graph of its own. A tensor a piece reads from outside becomes one of its inputs, a tensor
read outside a piece becomes one of its outputs, both named by a *key* (`key_of`) that the
runtime uses to carry the value from one piece to the next; a constant read by a piece is
copied into it (never passed around). Control-flow subgraphs move with their node.

>>> import mdsl
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (3,))
...     h = x * 2.0
...     g.output(h + 1.0, "y")
>>> first, second = split_graph(g, {"Mul": 0, "Add": 1}, ["front", "back"])
>>> first.inputs, first.outputs, second.inputs, second.outputs
({'x': 'x'}, {'Mul': 'Mul'}, {'Mul': 'Mul'}, {'Add': 'Add'})
>>> [n.op_type for n in second.graph.nodes]
['Input', 'Const', 'Add', 'Output']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Layer, Node, Tensor
from mdsl.ir.rewrite import clone_graph, use_map


@dataclass
class Piece:
    """One piece: a standalone graph, where each of its inputs comes from (input name ->
    key) and what each of its outputs carries (output name -> key)."""

    graph: Graph
    inputs: dict[str, str]
    outputs: dict[str, str]


def tensor_key(t: Tensor) -> str:
    """The default key of a tensor: its name, usable as an input or output name."""
    return t.name.replace(":", "__")


def split_graph(
    g: Graph,
    piece_of: Mapping[str, int],
    names: Sequence[str],
    key_of: Callable[[Tensor], str] = tensor_key,
) -> list[Piece]:
    """One `Piece` per name, holding the nodes `piece_of` (node name -> piece index) puts
    there; nodes it does not name (inputs, outputs, copies) belong to no piece. `g` is not
    changed. Pieces must be cut so that each only reads pieces that can run before it."""
    work = clone_graph(g)
    readers = use_map(work)
    members: list[set[str]] = [set() for _ in names]
    for name, index in piece_of.items():
        members[index].add(name)
    builders = [_PieceBuilder(Graph(name), key_of, members[i]) for i, name in enumerate(names)]
    for node in work.nodes:
        index = piece_of.get(node.name)
        if index is None or node.op_type in (INPUT, OUTPUT):
            continue
        builders[index].take(node, piece_of)
    for builder in builders:
        builder.add_outputs(readers, piece_of)
        _copy_layer_records(g, builder.graph)
    return [Piece(b.graph, b.inputs, b.outputs) for b in builders]


class _PieceBuilder:
    def __init__(self, graph: Graph, key_of: Callable[[Tensor], str], member_names: set[str]):
        self.graph = graph
        self.key_of = key_of
        self.taken = set(member_names)  # names the piece's own nodes will bring
        self.inputs: dict[str, str] = {}
        self.outputs: dict[str, str] = {}
        self._boundary: dict[Tensor, Tensor] = {}
        self._members: list[Node] = []

    def take(self, node: Node, piece_of: Mapping[str, int]) -> None:
        """Move `node` in, its inputs from outside rewired to inputs or constants."""
        here = piece_of[node.name]
        for i, t in enumerate(node.inputs):
            if t is not None and piece_of.get(t.producer.name) != here:
                node.inputs[i] = self._boundary_tensor(t)
        self.graph.append(node)
        for sub in node.subgraphs.values():
            sub.parent = self.graph
        self._members.append(node)

    def _boundary_tensor(self, t: Tensor) -> Tensor:
        inside = self._boundary.get(t)
        if inside is not None:
            return inside
        producer = t.producer
        if producer.op_type == CONST:
            node = _node(self.graph, self._free_name(producer.name), CONST, producer)
            node.attrs = dict(producer.attrs)
        else:
            key = self.key_of(t)
            node = _node(self.graph, self._free_name(key), INPUT, producer)
            node.layer = ""
            self.inputs[node.name] = key
        node.outputs = [Tensor(t.type, node, 0)]
        self.graph.append(node)
        self.taken.add(node.name)
        self._boundary[t] = node.outputs[0]
        return node.outputs[0]

    def add_outputs(self, readers: Mapping[Tensor, list], piece_of: Mapping[str, int]) -> None:
        """An output for every tensor of the piece read by a node outside it."""
        for node in self._members:
            here = piece_of[node.name]
            for t in node.outputs:
                outside = [r for r, _ in readers.get(t, ()) if piece_of.get(r.name) != here]
                if outside:
                    self._add_output(t)

    def _free_name(self, name: str) -> str:
        while name in self.taken:
            name = f"{name}_"
        return name

    def _add_output(self, t: Tensor) -> None:
        key = self.key_of(t)
        name = key
        while f"Output_{name}" in self.taken or name in self.outputs:
            name = f"{name}_"
        self.taken.add(f"Output_{name}")
        node = Node(f"Output_{name}", OUTPUT, [t], {"name": name}, device=t.producer.device)
        self.graph.append(node)
        self.outputs[name] = key


def _node(graph: Graph, name: str, op_type: str, like: Node) -> Node:
    return Node(
        name,
        op_type,
        [],
        {},
        layer=like.layer,
        source=like.source,
        device=like.device,
        graph=graph,
    )


def _copy_layer_records(src: Graph, dst: Graph) -> None:
    """Give `dst`'s layers (and their ancestors) the function names `src` recorded."""
    for path in list(dst.layers):
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            record = dst.layers.get(prefix)
            if record is None:
                record = dst.layers[prefix] = Layer(prefix, "")
            if prefix in src.layers:
                record.function = src.layers[prefix].function
            dst.layer_names.reserve(prefix)
