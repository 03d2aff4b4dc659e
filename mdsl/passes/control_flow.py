"""Control-flow passes: decide at compile time what can be, hoist loop invariants, prune.

The subgraphs of If, Case and While nodes are self-contained (`mdsl.ops.control_flow`),
so the general passes (fold_constants, simplify, cse, dce, layout, fusion) work inside
them unchanged; these passes work across the boundary between a node and its subgraphs.

- `fold_control_flow` (cleanup, levels 1-3):
  an If or Case whose selector is a constant is replaced by the taken branch, inlined
  (its nodes move into the enclosing graph, reading the node's inputs where the branch
  read its parameters); a While whose condition is the constant false is replaced by
  its initial values; small constants a node captures are copied into its subgraphs
  (so folding and simplification see them there) and are no longer passed in. A
  replacement is skipped where a value's type would change (a dim declared dynamic
  would become known, and the types inferred downstream with it would be stale).
- `hoist_loop_invariants` (rewrite, levels 2-3):
  nodes of a While's cond or body whose inputs are all loop invariant (captured
  tensors, constants, other invariant nodes) move before the loop, which captures their
  results instead. Stateful and random ops and nodes holding subgraphs stay. A hoisted
  node runs once even when the loop runs zero times: ops are taken to be pure.
- `prune_control_flow` (cleanup, levels 1-3):
  If/Case outputs nobody reads are removed with their results in every branch; While
  loop vars that neither an output, the condition nor another live loop var needs are
  removed; captures no subgraph reads are no longer passed in. Nodes left unread inside
  the subgraphs go too.

>>> import numpy as np, mdsl
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (3,))
...     flag = g.const("flag", np.array(True))
...     g.output(mdsl.cond(flag, lambda: x * 2.0, lambda: -x), "y")
>>> [n.name for n in mdsl.passes.run(g, ["fold_control_flow", "dce"]).nodes]
['x', 'cond/then/Const', 'cond/then/Mul', 'Output_y']
"""

from __future__ import annotations

import math

from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Layer, Node, Tensor
from mdsl.ir.rewrite import all_graphs, insert_nodes, mark_changed, prune_dead, replace_all_uses
from mdsl.ops.control_flow import (
    CASE,
    WHILE,
    add_params,
    bounds_attr,
    control_flow,
    is_control_flow,
    subgraph_params,
    subgraph_results,
)
from mdsl.ops.registry import RANDOM_OPS, get_op, has_op
from mdsl.passes.manager import PassResult, register

MAX_SUNK_ELEMENTS = 64  # bigger captured constants (weights) stay outside, passed in


# -- fold_control_flow -----------------------------------------------------------------------------
@register("fold_control_flow", levels=(1, 2, 3), phase="cleanup")
def fold_control_flow(g: Graph) -> PassResult:
    """Inline branches picked by constant selectors, drop loops whose condition is the
    constant false, copy small captured constants into subgraphs."""
    decided = 0
    while (found := _first_decided(g)) is not None:
        _replace_decided(*found)
        decided += 1
    sunk = sum(_sink_constants(n) for sub in list(all_graphs(g)) for n in sub.nodes)
    summary = f"decided {decided} control-flow node(s), sank {sunk} constant(s)"
    return PassResult(g, decided + sunk > 0, summary)


def _first_decided(g: Graph) -> tuple[Node, Graph | None] | None:
    """A control-flow node decided at compile time and what replaces it (the taken
    branch; None for a loop that never runs); None when there is no such node."""
    for sub in all_graphs(g):
        for node in sub:
            if is_control_flow(node):
                decided = _decision(node)
                if decided is not False:
                    return node, decided
    return None


def _decision(node: Node):
    """The branch `node` is sure to take, None for a While sure not to run, or False."""
    cf = control_flow(node)
    if cf.kind == WHILE:
        go = _constant(subgraph_results(cf.cond)[0])
        decided, values = None, list(cf.loop_inputs)
        if go is None or go.any():
            return False
    else:
        selector = _constant(cf.selector)
        if selector is None:
            return False
        index = int(selector.reshape(-1)[0]) if cf.kind == CASE else 1 - bool(selector.any())
        if not 0 <= index < len(cf.branches):
            return False  # the run-time error says it best
        decided = cf.branches[index]
        values = subgraph_results(decided)
    same = all(v.shape == t.shape and v.dtype == t.dtype for v, t in zip(values, node.outputs))
    return decided if same else False


def _constant(t: Tensor):
    return t.producer.const_value() if t.producer.op_type == CONST else None


def _replace_decided(node: Node, branch: Graph | None) -> None:
    owner = node.graph
    if branch is None:
        replacement = list(control_flow(node).loop_inputs)
    else:
        replacement = _inline(node, branch)
    for old, new in zip(node.outputs, replacement):
        replace_all_uses(owner, old, new)
    owner.replace_nodes([n for n in owner if n is not node])


def _inline(node: Node, sub: Graph) -> list[Tensor]:
    """Move `sub`'s nodes just before `node`, reading `node`'s inputs where `sub` read
    its parameters; returns the tensors standing for `sub`'s results."""
    offset = control_flow(node).param_offset
    mapping = {p: node.inputs[offset + k] for k, p in enumerate(subgraph_params(sub))}
    _move_nodes(sub, node, mapping)
    return [mapping.get(t, t) for t in subgraph_results(sub)]


def _move_nodes(sub: Graph, node: Node, mapping: dict) -> None:
    """Move `sub`'s computing nodes into `node`'s graph, just before `node`."""
    owner = node.graph
    moved = [n for n in sub if n.op_type not in (INPUT, OUTPUT)]
    for n in moved:
        n.inputs = [None if t is None else mapping.get(t, t) for t in n.inputs]
        _adopt(owner, n)
    for path, lay in sub.layers.items():
        if path not in owner.layers:
            owner.layers[path] = Layer(path, lay.function)
            owner.layer_names.reserve(path)
    order = owner.nodes
    at = order.index(node)
    owner.replace_nodes(order[:at] + moved + order[at:])


def _adopt(owner: Graph, n: Node) -> None:
    """Make `n` a node of `owner` (renamed if its name is taken there)."""
    n.name = owner.node_names.unique(n.name)
    n.graph = owner
    for sub in n.subgraphs.values():
        sub.parent = owner


def _sink_constants(node: Node) -> int:
    """Copy small constants `node` captures into its subgraphs; returns how many."""
    if not is_control_flow(node):
        return 0
    cf = control_flow(node)
    first_capture = len(node.inputs) - len(cf.captures)
    sunk = [
        i
        for i in range(first_capture, len(node.inputs))
        if _constant(node.inputs[i]) is not None and _small(node.inputs[i])
    ]
    for sub in cf.subgraphs:
        params = subgraph_params(sub)
        for i in sunk:
            _replace_param_by_const(sub, params[i - cf.param_offset], node.inputs[i].producer)
    if sunk:
        node.inputs = [t for i, t in enumerate(node.inputs) if i not in sunk]
        mark_changed(node.graph)
    return len(sunk)


def _small(t: Tensor) -> bool:
    return t.type.is_static and math.prod(t.shape) <= MAX_SUNK_ELEMENTS


def _replace_param_by_const(sub: Graph, param: Tensor, const: Node) -> None:
    holder = param.producer
    copy = Node(
        holder.name,
        CONST,
        [],
        {"value": const.attrs["value"]},
        layer=holder.layer,
        source=const.source,
        device=const.device,
    )
    copy.outputs = [Tensor(param.type, copy, 0)]
    for reader, i in sub.consumers(param):
        reader.inputs[i] = copy.outputs[0]
    sub.replace_nodes([copy if n is holder else n for n in sub])


# -- hoist_loop_invariants -------------------------------------------------------------------------
@register("hoist_loop_invariants", levels=(2, 3), phase="rewrite")
def hoist_loop_invariants(g: Graph) -> PassResult:
    """Move the loop-invariant nodes of While conditions and bodies before the loop."""
    hoisted = 0
    for owner in reversed(list(all_graphs(g))):  # inner loops first: their invariants
        for node in owner.nodes:  # may then leave the enclosing loop too
            if node.op_type == WHILE:
                cf = control_flow(node)
                hoisted += _hoist(node, cf.cond) + _hoist(node, cf.body)
    return PassResult(g, hoisted > 0, f"hoisted {hoisted} node(s) out of loops")


def _hoist(node: Node, sub: Graph) -> int:
    n_vars = node.attrs["num_loop_vars"]
    params = subgraph_params(sub)
    invariant = set(params[n_vars:])
    # sizes bound inside the loop (its own dims, what nodes staying in it bind): a node
    # whose type uses one reads it through its attributes and must stay too
    bound_here = set(node.attrs.get("dynamic") or ())
    consts: list[Node] = []
    hoisted: list[Node] = []
    for m in sub:
        if m.op_type == CONST:
            consts.append(m)
            invariant.update(m.outputs)
        elif (
            _hoistable(m)
            and all(t is None or t in invariant for t in m.inputs)
            and not _symbols_of(m) & bound_here
        ):
            hoisted.append(m)
            invariant.update(m.outputs)
        else:
            bound_here |= _bound_by(m)
    if not hoisted:
        return 0
    reads = {t for m in hoisted for t in m.inputs if t is not None}
    copies = [_outer_const(node.graph, c) for c in consts if c.outputs[0] in reads]
    outside = {p: node.inputs[k] for k, p in enumerate(params)}
    outside.update((c.outputs[0], copy.outputs[0]) for c, copy in copies)
    for m in hoisted:
        m.inputs = [None if t is None else outside.get(t, t) for t in m.inputs]
        _adopt(node.graph, m)
    gone = {id(m) for m in hoisted}
    sub.replace_nodes([m for m in sub if id(m) not in gone])
    insert_nodes(node.graph, [copy for _, copy in copies] + hoisted, before=node)
    _capture_hoisted(node, sub, [t for m in hoisted for t in m.outputs])
    return len(hoisted)


def _bound_by(m: Node) -> set[str]:
    """The symbols `m` and the nodes of its subgraphs bind when they run (attr `dynamic`)."""
    inside = [n for sub in m.subgraphs.values() for g in all_graphs(sub) for n in g]
    return {s for n in (m, *inside) for s in n.attrs.get("dynamic") or ()}


def _symbols_of(m: Node) -> set[str]:
    """The symbols `m`'s output types use (sizes its attributes or inputs give it)."""
    return {s for t in m.outputs for d in t.type.shape for s in getattr(d, "free_symbols", ())}


def _hoistable(m: Node) -> bool:
    if m.op_type in (INPUT, OUTPUT, CONST) or m.subgraphs or m.op_type in RANDOM_OPS:
        return False
    return has_op(m.op_type) and not get_op(m.op_type).extra.get("stateful")


def _outer_const(owner: Graph, const: Node) -> tuple[Node, Node]:
    copy = Node(
        owner.node_names.unique(const.name),
        CONST,
        [],
        dict(const.attrs),
        layer=const.layer,
        source=const.source,
        device=const.device,
    )
    copy.outputs = [Tensor(const.outputs[0].type, copy, 0)]
    copy.graph = owner
    return const, copy


def _capture_hoisted(node: Node, sub: Graph, tensors: list[Tensor]) -> None:
    """Pass the hoisted `tensors` still read inside `sub` into the loop: a new capture
    of the node and a new parameter of each of its subgraphs."""
    uses = {t: sub.consumers(t) for t in tensors}
    needed = [t for t in tensors if uses[t]]
    for s in control_flow(node).subgraphs:
        new_params = add_params(s, [(t.name, t.type) for t in needed])
        if s is sub:
            for t, p in zip(needed, new_params):
                for reader, i in uses[t]:
                    reader.inputs[i] = p
            mark_changed(sub)
    node.inputs = node.inputs + needed
    mark_changed(node.graph)


# -- prune_control_flow ----------------------------------------------------------------------------
@register("prune_control_flow", levels=(1, 2, 3), phase="cleanup")
def prune_control_flow(g: Graph) -> PassResult:
    """Remove unread If/Case outputs, unneeded While loop vars and unread captures."""
    removed = 0
    for owner in list(all_graphs(g)):
        for node in owner.nodes:
            if is_control_flow(node) and node.graph is owner:
                removed += _prune(node)
    summary = f"removed {removed} unneeded output(s), loop var(s), capture(s) and node(s)"
    return PassResult(g, removed > 0, summary)


def _prune(node: Node) -> int:
    """Prune `node`; returns how many outputs, loop vars, captures and dead nodes went."""
    if node.op_type == WHILE:
        removed = _prune_loop_vars(node)
    else:
        removed = _prune_branch_outputs(node)
    removed += sum(prune_dead(sub) for sub in control_flow(node).subgraphs)
    return removed + _prune_captures(node)


def _prune_branch_outputs(node: Node) -> int:
    owner = node.graph
    keep = [i for i, t in enumerate(node.outputs) if owner.consumers(t)]
    if not keep or len(keep) == len(node.outputs):
        return 0  # a node read by no one at all is dce's to remove
    removed = len(node.outputs) - len(keep)
    for sub in control_flow(node).branches:
        _keep_results(sub, keep)
    _keep_outputs(node, keep)
    return removed


def _keep_outputs(node: Node, keep: list[int]) -> None:
    node.outputs = [node.outputs[i] for i in keep]
    for i, t in enumerate(node.outputs):
        t.index = i
    mark_changed(node.graph)


def _keep_results(sub: Graph, keep: list[int]) -> None:
    """Keep the results of `sub` at positions `keep` (renumbered 0, 1, ...)."""
    renumber = {str(old): str(new) for new, old in enumerate(keep)}
    nodes = []
    for n in sub:
        if n.op_type == OUTPUT:
            if n.attrs["name"] not in renumber:
                continue
            name = renumber[n.attrs["name"]]
            n.attrs = {**n.attrs, "name": name}
            n.name = f"Output_{name}"
        nodes.append(n)
    sub.replace_nodes(nodes)


def _prune_loop_vars(node: Node) -> int:
    cf = control_flow(node)
    n = len(cf.loop_inputs)
    live = {k for k, t in enumerate(node.outputs) if node.graph.consumers(t)}
    live |= {k for k in _param_deps(cf.cond, subgraph_results(cf.cond)) if k < n}
    body_results = subgraph_results(cf.body)
    pending = list(live)
    while pending:
        for j in _param_deps(cf.body, [body_results[pending.pop()]]):
            if j < n and j not in live:
                live.add(j)
                pending.append(j)
    keep = sorted(live)
    if not keep or len(keep) == n:
        return 0
    _keep_results(cf.body, keep)
    prune_dead(cf.body)
    prune_dead(cf.cond)
    dropped = [k for k in range(n) if k not in live]
    for sub in (cf.cond, cf.body):
        _drop_params(sub, dropped)
    node.inputs = [t for k, t in enumerate(node.inputs) if k not in dropped]
    _keep_outputs(node, keep)
    carried = {s for t in node.outputs for d in t.shape for s in getattr(d, "free_symbols", ())}
    dynamic = tuple(s for s in node.attrs["dynamic"] if s in carried)
    node.attrs = {
        **node.attrs,
        "num_loop_vars": len(keep),
        "dynamic": dynamic,
        "bounds": bounds_attr(dynamic, cf.bounds),
    }
    return len(dropped)


def _param_deps(sub: Graph, tensors: list[Tensor]) -> set[int]:
    """Indices of the parameters of `sub` that `tensors` depend on."""
    index = {p: k for k, p in enumerate(subgraph_params(sub))}
    seen: set[int] = set()
    deps: set[int] = set()
    stack = list(tensors)
    while stack:
        t = stack.pop()
        if id(t.producer) in seen:
            continue
        seen.add(id(t.producer))
        if t in index:
            deps.add(index[t])
        stack += [i for i in t.producer.inputs if i is not None]
    return deps


def _prune_captures(node: Node) -> int:
    cf = control_flow(node)
    first = len(node.inputs) - len(cf.captures)
    param_of = [i - cf.param_offset for i in range(first, len(node.inputs))]
    unread = [
        j
        for j in param_of
        if not any(sub.consumers(subgraph_params(sub)[j]) for sub in cf.subgraphs)
    ]
    if not unread:
        return 0
    for sub in cf.subgraphs:
        _drop_params(sub, unread)
    dropped = {j + cf.param_offset for j in unread}
    node.inputs = [t for i, t in enumerate(node.inputs) if i not in dropped]
    mark_changed(node.graph)
    return len(unread)


def _drop_params(sub: Graph, indices: list[int]) -> None:
    params = subgraph_params(sub)
    gone = {id(params[j].producer) for j in indices}
    sub.replace_nodes([n for n in sub if id(n) not in gone])


__all__ = [
    "MAX_SUNK_ELEMENTS",
    "fold_control_flow",
    "hoist_loop_invariants",
    "prune_control_flow",
]
