"""Graph surgery: copy a graph, rewire uses, remove and insert nodes, keep topological order.

These helpers know nothing of any op (the IR imports nothing else of mdsl); passes build
on them. Control-flow subgraphs may read tensors of their enclosing graphs, so every
helper that looks at uses also looks inside subgraphs.

>>> import mdsl
>>> from mdsl.ir.rewrite import clone_graph, replace_all_uses, prune_dead
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (2,))
...     g.output(mdsl.ops.identity(x), "y")
>>> g2 = clone_graph(g)
>>> replace_all_uses(g2, g2.node("Identity").output, g2.inputs["x"])
1
>>> prune_dead(g2), [n.op_type for n in g2], [n.op_type for n in g]
(1, ['Input', 'Output'], ['Input', 'Identity', 'Output'])
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

import numpy as np

from mdsl.ir.errors import GraphError
from mdsl.ir.graph import INPUT, OUTPUT, Graph, Layer, Node, Tensor
from mdsl.ir.pass_log import PassLog
from mdsl.ir.tensor_type import TensorType

# Graph attributes clone_graph rebuilds itself; any other attribute is copied shallowly.
_REBUILT = {
    "name",
    "_nodes",
    "_by_name",
    "layers",
    "pass_log",
    "parent",
    "node_names",
    "layer_names",
    "_saved_scope",
    "_version",
    "_use_cache",
    "_token",
}


def all_graphs(g: Graph) -> Iterator[Graph]:
    """`g` and every nested control-flow subgraph, parents before children."""
    yield g
    for node in list(g):
        for sub in node.subgraphs.values():
            yield from all_graphs(sub)


# -- copying --------------------------------------------------------------------------------
def clone_graph(g: Graph, *, name: str | None = None) -> Graph:
    """A deep structural copy of `g`: new nodes, tensors, layers and subgraphs; constant
    arrays (read-only) and attr values are shared. Passes may mutate the copy freely."""
    return _clone(g, name or g.name, parent=g.parent, mapping={})


def _clone(g: Graph, name: str, parent: Graph | None, mapping: dict) -> Graph:
    new = Graph(name)
    new.parent = parent
    for key, value in vars(g).items():
        if key not in _REBUILT:
            setattr(new, key, _shallow_copy(value))
    for path, lay in g.layers.items():
        new.layers[path] = Layer(lay.path, lay.function)
        new.layer_names.reserve(path)
    new.pass_log = PassLog(g.pass_log)
    for node in g:
        new.append(_clone_node(node, new, mapping))
    return new


def _shallow_copy(value):
    if isinstance(value, (list, dict, set)):
        return type(value)(value)
    return value


def _clone_node(node: Node, owner: Graph, mapping: dict) -> Node:
    copy = Node(
        node.name,
        node.op_type,
        [None if t is None else mapping.get(t, t) for t in node.inputs],
        dict(node.attrs),
        layer=node.layer,
        source=node.source,
        device=node.device,
        fusion_group=node.fusion_group,
    )
    copy.outputs = [Tensor(t.type, copy, t.index) for t in node.outputs]
    mapping.update(zip(node.outputs, copy.outputs))
    copy.subgraphs = {
        key: _clone(sub, sub.name, parent=owner, mapping=mapping)
        for key, sub in node.subgraphs.items()
    }
    return copy


# -- uses -----------------------------------------------------------------------------------
def use_map(g: Graph) -> dict[Tensor, list[tuple[Node, int]]]:
    """Every (node, input index) reading each tensor, in `g` and its nested subgraphs."""
    uses: dict[Tensor, list[tuple[Node, int]]] = {}
    for sub in all_graphs(g):
        for node in sub:
            for i, t in enumerate(node.inputs):
                if t is not None:
                    uses.setdefault(t, []).append((node, i))
    return uses


def replace_all_uses(g: Graph, old: Tensor, new: Tensor, *, check_type: bool = True) -> int:
    """Make every reader of `old` (in `g` and its subgraphs) read `new`; returns how many
    inputs were rewired. With `check_type`, `new` must have `old`'s shape and dtype."""
    if check_type and (old.shape != new.shape or old.dtype != new.dtype):
        raise GraphError(
            f"cannot replace {old.name} ({old.type.describe()}) by "
            f"{new.name} ({new.type.describe()}): types differ"
        )
    count = 0
    for sub in all_graphs(g):
        for node in sub:
            for i, t in enumerate(node.inputs):
                if t is old:
                    node.inputs[i] = new
                    count += 1
        if count:
            mark_changed(sub)
    return count


def mark_changed(g: Graph) -> None:
    """Invalidate `g`'s cached use lists after node inputs were edited in place."""
    g._version += 1


# -- creating, removing and ordering nodes --------------------------------------------------
def new_node(
    g: Graph,
    op_type: str,
    inputs: list[Tensor | None],
    attrs: dict,
    types: list[TensorType],
    *,
    name: str | None = None,
    like: Node | None = None,
    layer: str | None = None,
) -> Node:
    """A node for `g` with a fresh unique name, not yet placed in `g` (see `insert_nodes`).

    `like` lends its layer, source and device (a rewrite's replacement keeps its origin's);
    `layer` overrides the layer. The name is `<layer>/<name or op_type>`, made unique.
    """
    if layer is None:
        layer = like.layer if like is not None else ""
    leaf = name or op_type
    full = leaf if not layer or leaf.startswith(layer + "/") else f"{layer}/{leaf}"
    node = Node(
        g.node_names.unique(full),
        op_type,
        list(inputs),
        attrs,
        layer=layer,
        source=like.source if like is not None else None,
        device=like.device if like is not None else None,
    )
    node.outputs = [Tensor(t, node, i) for i, t in enumerate(types)]
    node.graph = g
    return node


def insert_nodes(g: Graph, nodes: Iterable[Node], *, before: Node | None = None) -> None:
    """Place new nodes in `g`, in the given order, just before `before` (default: at the
    end), then restore topological order if needed."""
    nodes = list(nodes)
    order = g.nodes
    at = len(order) if before is None else _index_of(g, before)
    g.replace_nodes(order[:at] + nodes + order[at:])
    if not is_topological(g):
        toposort(g)


def remove_nodes(g: Graph, nodes: Iterable[Node], *, check: bool = True) -> int:
    """Remove `nodes` from `g`; with `check`, refuse if a remaining node reads them."""
    doomed = {id(n) for n in nodes}
    if not doomed:
        return 0
    if check:
        for sub in all_graphs(g):
            for node in sub:
                if id(node) in doomed:
                    continue
                for t in node.inputs:
                    if t is not None and id(t.producer) in doomed:
                        raise GraphError(
                            f"cannot remove {t.producer.name}: {node.name} still reads {t.name}"
                        )
    kept = [n for n in g if id(n) not in doomed]
    removed = len(g) - len(kept)
    g.replace_nodes(kept)
    return removed


def prune_dead(g: Graph, candidates: Iterable[Node] | None = None) -> int:
    """Remove nodes of `g` whose outputs nobody reads (Inputs and Outputs stay), starting
    from `candidates` (default: every node) and following their inputs upward. A node
    binding symbols (attr `dynamic`) that other nodes' types use stays: they read its
    sizes through their attributes, not through an edge (a ValueDims node)."""
    uses = use_map(g)
    counts = {t: len(u) for t, u in uses.items()}
    pending = list(g if candidates is None else candidates)
    dead: set[int] = set()
    typed: dict[str, int] | None = None
    while pending:
        node = pending.pop()
        if id(node) in dead or node.graph is not g or node.op_type in (INPUT, OUTPUT):
            continue
        if any(counts.get(t, 0) for t in node.outputs):
            continue
        if node.attrs.get("dynamic"):
            typed = _symbol_uses(g) if typed is None else typed
            own = _symbol_uses_of([node])
            if any(typed.get(s, 0) > own.get(s, 0) for s in node.attrs["dynamic"]):
                continue
        dead.add(id(node))
        for t in _reads(node):
            if t in counts:
                counts[t] -= 1
                if counts[t] == 0:
                    pending.append(t.producer)
    if dead:
        g.replace_nodes([n for n in g if id(n) not in dead])
    return len(dead)


def _symbol_uses(g: Graph) -> dict[str, int]:
    """symbol -> how many tensor types of `g` and its subgraphs use it."""
    return _symbol_uses_of([n for sub in all_graphs(g) for n in sub])


def _symbol_uses_of(nodes: list[Node]) -> dict[str, int]:
    """symbol -> how many output dims and attribute values of `nodes` use it."""
    found: dict[str, int] = {}
    for n in nodes:
        dims = [d for t in n.outputs for d in t.type.shape]
        for value in n.attrs.values():
            dims += list(value) if isinstance(value, tuple | list) else [value]
        for d in dims:
            for s in getattr(d, "free_symbols", ()):
                found[s] = found.get(s, 0) + 1
    return found


def _reads(node: Node) -> list[Tensor]:
    """Tensors `node` reads: its inputs and what its subgraphs read from outside."""
    reads = [t for t in node.inputs if t is not None]
    for sub in node.subgraphs.values():
        inner = {t for s in all_graphs(sub) for n in s for t in n.outputs}
        reads += [
            t
            for s in all_graphs(sub)
            for n in s
            for t in n.inputs
            if t is not None and t not in inner
        ]
    return reads


def is_topological(g: Graph) -> bool:
    """Whether every node of `g` comes after the producers it (or its subgraphs) reads."""
    seen: set[int] = set()
    for node in g:
        for t in _reads(node):
            if t.producer.graph is g and id(t.producer) not in seen:
                return False
        seen.add(id(node))
    return True


def toposort(g: Graph) -> None:
    """Reorder `g` topologically, keeping the current order wherever it is already legal
    (a stable sort: nodes move only as far as their inputs force them)."""
    nodes = g.nodes
    position = {id(n): i for i, n in enumerate(nodes)}
    waiting: dict[int, int] = {}
    readers: dict[int, list[Node]] = {}
    for node in nodes:
        producers = {id(t.producer) for t in _reads(node) if id(t.producer) in position}
        producers.discard(id(node))
        waiting[id(node)] = len(producers)
        for p in producers:
            readers.setdefault(p, []).append(node)
    ready = [(position[id(n)], n) for n in nodes if waiting[id(n)] == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, node = heapq.heappop(ready)
        ordered.append(node)
        for reader in readers.get(id(node), ()):
            waiting[id(reader)] -= 1
            if waiting[id(reader)] == 0:
                heapq.heappush(ready, (position[id(reader)], reader))
    if len(ordered) != len(nodes):
        stuck = [n.name for n in nodes if waiting[id(n)] > 0][:5]
        raise GraphError(f"graph {g.name!r} has a cycle through {', '.join(stuck)}")
    g.replace_nodes(ordered)


def _index_of(g: Graph, node: Node) -> int:
    for i, n in enumerate(g):
        if n is node:
            return i
    raise GraphError(f"node {node.name} is not in graph {g.name!r}")


def appended_since(g: Graph, start: int) -> list[Node]:
    """The nodes appended to `g` after it held `start` nodes."""
    return g._nodes[start:]


# -- comparing attrs ------------------------------------------------------------------------
def attr_key(value):
    """A hashable key equal for equal attr values (arrays by dtype, shape and bytes)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(attr_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, attr_key(v)) for k, v in value.items())))
    if isinstance(value, float) and value != value:  # NaN equals itself as an attr
        return ("nan",)
    return (type(value).__name__, value)


def attrs_equal(a, b) -> bool:
    """Whether two attr values are the same (arrays compared by content)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        )
    return attr_key(a) == attr_key(b)
