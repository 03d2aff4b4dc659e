"""Graph-editing helpers: the classic hand edits, done safely.

Each helper edits the graph it is given in place (copy first with
`mdsl.passes.clone_graph` to keep the original) and keeps it valid: nodes stay in
topological order, types are re-inferred through the op registry, names stay unique.

- `replace_with_op`: replace a run of small ops by one (custom) op;
- `add_input`, `rename_input`, `add_output`, `rename_output`, `remove_output`;
- `extract_layer`: a layer as a standalone graph;
- `inline_graph`: copy a graph into another, wired to given tensors.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (2,))
...     g.output(ops.relu(x), "y")
>>> mdsl.passes.rename_output(g, "y", "out")
>>> list(g.outputs), g.has_node("Output_out")
(['out'], True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Layer, Node, Tensor
from mdsl.ir.rewrite import all_graphs, clone_graph, insert_nodes, new_node, use_map
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.registry import get_op


def make_node(
    g: Graph,
    op_type: str,
    inputs: list[Tensor | None],
    attrs: dict,
    *,
    like: Node | None = None,
    name: str | None = None,
    layer: str | None = None,
) -> Node:
    """A node of `op_type` for `g` (not yet placed), attrs checked and output types
    inferred by the op registry; `like` lends its layer, source and device."""
    if op_type == CONST:
        value = attrs["value"]
        types = [TensorType(value.shape, value.dtype)]
        return new_node(g, CONST, [], attrs, types, name=name, like=like, layer=layer)
    opdef = get_op(op_type)
    where = f"{like.name} ({like.op_type})" if like is not None else op_type
    try:
        checked = opdef.check_attrs(attrs)
        types = opdef.infer_types([None if t is None else t.type for t in inputs], checked)
    except MdslError as e:
        raise type(e)(f"building {op_type} next to {where}: {e.message}") from None
    return new_node(g, op_type, inputs, checked, types, name=name, like=like, layer=layer)


# -- replacing a run of ops by one op -------------------------------------------------------
def replace_with_op(
    g: Graph, nodes: Iterable[Node | str], op_type: str, attrs: dict | None = None, *, name=None
) -> Node:
    """Replace `nodes` (a connected run, by node or name) by one node of `op_type`.

    The new node reads the tensors entering the run (in the order the run first reads
    them) and produces the tensors leaving it (read by nodes outside the run or by graph
    outputs), in the run's order; its inferred output types must match theirs. The
    op (typically a custom `@mdsl.op_proto`) must already be registered.

    >>> import mdsl
    >>> from mdsl import ops
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (4,))
    ...     g.output(ops.relu(ops.neg(x)), "y")
    >>> node = mdsl.passes.replace_with_op(g, ["Neg", "Relu"], "Abs")  # any op of that type
    >>> [n.op_type for n in g.nodes]
    ['Input', 'Abs', 'Output']
    """
    run = [g.node(n) if isinstance(n, str) else n for n in nodes]
    if not run:
        raise GraphError("replace_with_op needs at least one node")
    members = {id(n) for n in run}
    for n in run:
        if n.graph is not g or n.op_type in (INPUT, OUTPUT):
            raise GraphError(f"cannot replace {n.name} ({n.op_type}): not an op node of {g.name!r}")
    entering = _entering_tensors(run, members)
    leaving = _leaving_tensors(g, run, members)
    if not leaving:
        raise GraphError("the nodes to replace produce nothing read outside them")
    last = max(run, key=_position_in(g))
    node = make_node(g, op_type, entering, dict(attrs or {}), like=last, name=name)
    _check_replacement_types(node, leaving)
    insert_nodes(g, [node], before=last)
    uses = use_map(g)
    for old, new in zip(leaving, node.outputs):
        for reader, i in uses.get(old, []):
            if id(reader) not in members:
                reader.inputs[i] = new
    g.replace_nodes([n for n in g if id(n) not in members])
    return node


def _entering_tensors(run: list[Node], members: set[int]) -> list[Tensor]:
    entering: list[Tensor] = []
    for n in run:
        for t in n.inputs:
            if t is not None and id(t.producer) not in members and t not in entering:
                entering.append(t)
    return entering


def _leaving_tensors(g: Graph, run: list[Node], members: set[int]) -> list[Tensor]:
    uses = use_map(g)
    return [
        t
        for n in run
        for t in n.outputs
        if any(id(reader) not in members for reader, _ in uses.get(t, []))
    ]


def _position_in(g: Graph):
    position = {id(n): i for i, n in enumerate(g)}
    return lambda n: position[id(n)]


def _check_replacement_types(node: Node, leaving: list[Tensor]) -> None:
    got = [t.type.describe() for t in node.outputs]
    want = [t.type.describe() for t in leaving]
    if got != want:
        raise GraphError(
            f"{node.op_type} would produce {', '.join(got)}, "
            f"but the replaced nodes produce {', '.join(want)}"
        )


# -- inputs and outputs ---------------------------------------------------------------------
def add_input(g: Graph, name: str, shape, dtype="float32", format="ND") -> Tensor:
    """Declare a new graph input (placed after the existing ones); returns its tensor."""
    if not isinstance(name, str) or not name or g.has_node(name):
        raise GraphError(f"input name {name!r} is empty, not a string, or already taken")
    try:
        ttype = TensorType(shape, dtype, format)
    except MdslError as e:
        raise type(e)(f"input {name!r}: {e.message}") from None
    node = new_node(g, INPUT, [], {}, [ttype], name=name)
    node.name = name
    nodes = g.nodes
    at = max((i + 1 for i, n in enumerate(nodes) if n.op_type == INPUT), default=0)
    g.replace_nodes([*nodes[:at], node, *nodes[at:]])
    return node.outputs[0]


def rename_input(g: Graph, old: str, new: str) -> None:
    """Rename graph input `old` to `new` (feeds then use the new name)."""
    node = _input_node(g, old)
    if not isinstance(new, str) or not new or g.has_node(new):
        raise GraphError(f"cannot rename input {old!r} to {new!r}: empty or taken")
    node.name = new
    g.replace_nodes(g.nodes)


def add_output(g: Graph, tensor: Tensor, name: str) -> None:
    """Make `tensor` (of `g`) graph output `name` (node `Output_<name>`)."""
    if not isinstance(tensor, Tensor) or tensor.producer.graph is not g:
        raise GraphError(f"output {name!r} must be a Tensor of graph {g.name!r}")
    if not isinstance(name, str) or not name or name in g.outputs:
        raise GraphError(f"output name {name!r} is empty, not a string, or already taken")
    node = new_node(g, OUTPUT, [tensor], {"name": name}, [])
    node.name = f"Output_{name}"
    if g.has_node(node.name):
        raise GraphError(f"a node named {node.name!r} already exists in graph {g.name!r}")
    g.append(node)


def rename_output(g: Graph, old: str, new: str) -> None:
    """Rename graph output `old` to `new` (its node becomes `Output_<new>`)."""
    node = _output_node(g, old)
    if not isinstance(new, str) or not new or new in g.outputs or g.has_node(f"Output_{new}"):
        raise GraphError(f"cannot rename output {old!r} to {new!r}: empty or taken")
    node.name = f"Output_{new}"
    node.attrs = {**node.attrs, "name": new}
    g.replace_nodes(g.nodes)


def remove_output(g: Graph, name: str) -> None:
    """Drop graph output `name` (what only it needed becomes dead: run "dce")."""
    node = _output_node(g, name)
    if len(g.outputs) == 1:
        raise GraphError(f"cannot remove {name!r}: it is the only output of {g.name!r}")
    g.replace_nodes([n for n in g if n is not node])


def _input_node(g: Graph, name: str) -> Node:
    if name not in g.inputs:
        raise GraphError(f"graph {g.name!r} has no input {name!r} (inputs: {', '.join(g.inputs)})")
    return g.inputs[name].producer


def _output_node(g: Graph, name: str) -> Node:
    for node in g.output_nodes:
        if node.attrs["name"] == name:
            return node
    raise GraphError(f"graph {g.name!r} has no output {name!r} (outputs: {', '.join(g.outputs)})")


# -- extracting and inlining ----------------------------------------------------------------
def extract_layer(g: Graph, path: str, *, name: str | None = None) -> Graph:
    """Layer `path` (with its sublayers) of `g` as a standalone graph.

    Its inputs are the tensors entering the layer (named after them), its outputs the
    tensors leaving it (read outside the layer or graph outputs, named after them
    relative to the layer). Constants the layer reads from outside are copied in. `g`
    itself is not changed.

    >>> import mdsl
    >>> @mdsl.layer
    ... def block(x):
    ...     return mdsl.ops.relu(x * 2.0)
    >>> with mdsl.Graph("demo") as g:
    ...     g.output(block(g.input("x", (3,))) + 1.0, "y")
    >>> sub = mdsl.passes.extract_layer(g, "block")
    >>> list(sub.inputs), list(sub.outputs), [n.op_type for n in sub.nodes]
    (['x'], ['Relu'], ['Input', 'Const', 'Mul', 'Relu', 'Output'])
    """
    if path not in g.layers:
        raise GraphError(f"graph {g.name!r} has no layer {path!r}")
    copy = clone_graph(g)
    inside = [n for n in copy if _in_layer(n, path) and n.op_type not in (INPUT, OUTPUT)]
    if not inside:
        raise GraphError(f"layer {path!r} holds no op nodes")
    members = {id(n) for n in inside}
    entering = _entering_tensors(inside, members) + _closure_reads(inside, members)
    leaving = _leaving_tensors(copy, inside, members)
    out = Graph(name or path.replace("/", "_"))
    for p, lay in copy.layers.items():
        if p == path or p.startswith(path + "/"):
            out.layers[p] = lay
            out.layer_names.reserve(p)
            lay.node_names.clear()
    rewired: dict[Tensor, Tensor] = {}
    for t in dict.fromkeys(entering):
        rewired[t] = _boundary_tensor(out, t)
    for n in inside:
        for m in [n, *(m for s in _nested_graphs(n) for m in s)]:
            m.inputs = [None if t is None else rewired.get(t, t) for t in m.inputs]
        out.append(n)
        for sub in n.subgraphs.values():
            sub.parent = out
    for t in leaving:
        out_name = _relative(t.name, path)
        add_output(out, t, out_name)
    return out


def _in_layer(node: Node, path: str) -> bool:
    return node.layer == path or node.layer.startswith(path + "/")


def _closure_reads(inside: list[Node], members: set[int]) -> list[Tensor]:
    inner = {t for n in inside for s in _nested_graphs(n) for m in s for t in m.outputs}
    return [
        t
        for n in inside
        for s in _nested_graphs(n)
        for m in s
        for t in m.inputs
        if t is not None and t not in inner and id(t.producer) not in members
    ]


def _nested_graphs(node: Node):
    for sub in node.subgraphs.values():
        yield from all_graphs(sub)


def _boundary_tensor(out: Graph, t: Tensor) -> Tensor:
    """An Input of `out` for tensor `t` entering the layer (a copy if `t` is constant)."""
    if t.producer.op_type == CONST:
        attrs, op_type, name = dict(t.producer.attrs), CONST, t.producer.name
    else:
        attrs, op_type, name = {}, INPUT, t.name.replace(":", "_")
    node = new_node(out, op_type, [], attrs, [t.type], name=name, like=t.producer, layer="")
    out.append(node)
    return node.outputs[0]


def _relative(name: str, path: str) -> str:
    return name[len(path) + 1 :] if name.startswith(path + "/") else name


def inline_graph(
    g: Graph, sub: Graph, feeds: Mapping[str, Tensor], *, prefix: str | None = None
) -> dict[str, Tensor]:
    """Copy graph `sub` into `g`, its inputs wired to `feeds` (input name -> tensor of
    `g`); returns `sub`'s outputs as tensors of `g`. Copied nodes are named and layered
    under `prefix` (default: `sub.name`; "" keeps their own layer paths); types are
    re-inferred, so a symbolic dim of `sub` takes the size of the tensor fed to it.

    >>> import mdsl
    >>> with mdsl.Graph("double") as sub:
    ...     sub.output(sub.input("v", ("N",)) * 2.0, "out")
    >>> with mdsl.Graph("main") as g:
    ...     g.output(g.input("x", (3,)) + 1.0, "y")
    >>> outs = mdsl.passes.inline_graph(g, sub, {"v": g.outputs["y"]})
    >>> mdsl.passes.add_output(g, outs["out"], "z")
    >>> outs["out"].shape, [n.name for n in g.nodes][-3:]
    ((3,), ['double/Mul', 'Output_y', 'Output_z'])
    """
    _check_feeds(g, sub, feeds)
    prefix = sub.name if prefix is None else prefix
    copied = clone_graph(sub)
    mapping = {copied.inputs[name]: feeds[name] for name in sub.inputs}
    return _copy_nodes_into(g, copied, mapping, prefix)


def _check_feeds(g: Graph, sub: Graph, feeds: Mapping[str, Tensor]) -> None:
    missing = sorted(set(sub.inputs) - set(feeds))
    extra = sorted(set(feeds) - set(sub.inputs))
    if missing or extra:
        raise GraphError(
            f"inline_graph feeds for {sub.name!r}: missing {missing or 'none'}, "
            f"unknown {extra or 'none'}"
        )
    for name, t in sub.inputs.items():
        fed = feeds[name]
        if not isinstance(fed, Tensor) or fed.graph is not g:
            raise GraphError(f"inline_graph feed {name!r} must be a Tensor of graph {g.name!r}")
        if fed.dtype != t.dtype or fed.ndim != t.ndim:
            raise GraphError(
                f"inline_graph feed {name!r} is {fed.type.describe()}, "
                f"{sub.name!r} declares {t.type.describe()}"
            )


def _copy_nodes_into(g: Graph, src: Graph, mapping: dict, prefix: str) -> dict[str, Tensor]:
    outputs: dict[str, Tensor] = {}
    new_nodes = []
    for node in src:
        if node.op_type == INPUT:
            continue
        if node.op_type == OUTPUT:
            outputs[node.attrs["name"]] = mapping[node.inputs[0]]
            continue
        if node.subgraphs:
            raise GraphError(f"inline_graph cannot copy control flow yet ({node.name})")
        layer = "/".join(part for part in (prefix, node.layer) if part)
        inputs = [None if t is None else mapping[t] for t in node.inputs]
        leaf = node.name[len(node.layer) + 1 :] if node.layer else node.name
        copy = make_node(
            g, node.op_type, inputs, dict(node.attrs), like=node, name=leaf, layer=layer
        )
        mapping.update(zip(node.outputs, copy.outputs))
        new_nodes.append(copy)
    for layer in dict.fromkeys(n.layer for n in new_nodes):
        if layer and layer not in g.layers:
            g.layers[layer] = Layer(layer, "")
            g.layer_names.reserve(layer)
    insert_nodes(g, new_nodes, before=g.output_nodes[0] if g.output_nodes else None)
    return outputs
