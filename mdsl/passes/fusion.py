"""Fusion grouping: which nodes the backend emits as one kernel, recorded as `node.fusion_group`.

The pass only annotates: every compute node gets a group id (`"fg0"`, `"fg1"`, ... in
topological order of each group's first node); Input, Const and Output nodes get none.
`fusion_groups(g)` reads the annotation back as `FusionGroup` records (members in
topological order, kind, external inputs, materialized outputs) for the codegen, viz and
diff.

Group kinds (XLA's loop / input / custom fusions, Inductor's pointwise / reduction
kernels, TVM's injective / comm-reduce / out-elemwise-fusable patterns):

- "pointwise": elementwise ops over one iteration space (all outputs of one shape).
- "reduction": reductions over one (shape, axes) space, with a pointwise prologue (ops
  feeding a reduction, computed inside its loop) and epilogue (ops of the full or the
  reduced shape reading the results): softmax as ReduceMax/Sub/Exp/ReduceSum/Div, layer
  norm as ReduceMean/Sub/Mul/ReduceMean/Add/Sqrt/Div/Mul/Add, or the Softmax /
  LayerNormalization op itself.
- "extern_epilogue": a GEMM or convolution (category "extern": MatMul, Gemm, Conv) as the
  anchor, followed by pointwise ops of the anchor's output shape applied while the
  output tile is hot (bias, activation, residual add). Only ops downstream of the anchor
  join; nothing is fused in front of it.
- "opaque": a single node the code generator cannot fuse (data movement, opaque ops,
  control flow).

The algorithm is a greedy producer-consumer merge in topological order, the way TVM's
FuseOps and XLA's instruction fusion grow groups from producers into consumers. Each node
starts as its own group; it then tries to join the groups producing its inputs, anchors
first (extern, then reduction groups, then pointwise ones). A merge is kept only when the
union is legal:

1. Kinds: at most one extern anchor and no reduction beside it, every other member
   downstream of the anchor and of its output shape; reductions share one (shape, axes)
   space and their pointwise members have the full or the reduced shape; a pure pointwise
   group has one output shape.
2. Prologues are never duplicated (Inductor's rule): a pointwise member that feeds a
   reduction and is not itself downstream of one may join only if every reader of its
   output is in the group. Epilogue results read elsewhere are simply materialized.
3. No cycles: merging groups A and B is illegal if a path A -> X -> B (or B -> X -> A)
   runs through another group X, since the two kernels could then not be ordered. Each
   group keeps the set of nodes it transitively depends on through the group graph (a
   bitset over node positions, updated on every merge), so the test is: some direct
   producer group of B other than A depends on A. Testing convexity of A u B on the node
   graph alone would not do: two convex groups can still depend on each other.
4. Size: at most `max_group_size` nodes (default 32).

A tensor produced in a group and read outside it (or a graph output) is materialized: it
is listed in the group's `outputs`; everything else stays in registers.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph("mlp") as g:
...     x = g.input("x", ("N", 8))
...     y = ops.matmul(x, mdsl.param("w", (8, 4))) + mdsl.param("b", (4,))
...     g.output(ops.relu(y), "y")
>>> g2 = mdsl.passes.run(g, ["fuse"])
>>> [(grp.kind, [n.op_type for n in grp.nodes]) for grp in fusion_groups(g2)]
[('extern_epilogue', ['MatMul', 'Add', 'Relu'])]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mdsl.ir.errors import MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import all_graphs, use_map
from mdsl.ops.registry import get_op, has_op
from mdsl.passes.manager import PassResult, register

DEFAULT_MAX_GROUP_SIZE = 32
KINDS = ("pointwise", "reduction", "extern_epilogue", "opaque")
STRUCTURAL = (INPUT, CONST, OUTPUT)
GROUP_PREFIX = "fg"


@dataclass(frozen=True, slots=True)
class FusionGroup:
    """One fusion group: the nodes one kernel computes.

    `nodes`: members in topological order; `kind`: one of KINDS; `inputs`: tensors the
    members read that are produced outside the group (constants included), in order of
    first use; `outputs`: member results read outside the group or returned by the graph
    (materialized); `anchor`: the extern op or the first reduction, if any.
    """

    id: str
    kind: str
    nodes: tuple[Node, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    @property
    def anchor(self) -> Node | None:
        for role in ("extern", "reduction"):
            for node in self.nodes:
                if node_role(node) == role:
                    return node
        return None

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        ops = ", ".join(n.op_type for n in self.nodes)
        return f"FusionGroup({self.id!r}, {self.kind}, [{ops}])"


# -- what a node is to the fuser ------------------------------------------------------------
def node_role(node: Node) -> str:
    """ "pointwise", "reduction", "extern", "opaque" or "structural" (Input/Const/Output)."""
    if node.op_type in STRUCTURAL:
        return "structural"
    if node.subgraphs or not node.outputs or not has_op(node.op_type):
        return "opaque"
    category = get_op(node.op_type).category
    return category if category in ("pointwise", "reduction", "extern") else "opaque"


def reduction_space(node: Node) -> tuple:
    """(shape iterated, reduced axes) of a reduction node. Reductions that share a space
    can run in one kernel; an unknown reduction gets a space of its own. The op declares
    its axes (`mdsl.ops.reductions`)."""
    x = node.inputs[0].type if node.inputs and node.inputs[0] is not None else None
    if x is None:
        return ((), f"?{node.name}")
    try:
        return (x.shape, get_op(node.op_type).reduced_axes(node.attrs, x.rank))
    except (MdslError, TypeError, KeyError):  # axes we cannot read: a space of its own
        return (x.shape, f"?{node.name}")


def space_shapes(space: tuple) -> set:
    """The shapes a pointwise member of a reduction group over `space` may have: the full
    shape, and the reduced shape with kept or dropped axes."""
    shape, axes = space
    if isinstance(axes, str):  # unknown axes: only the full shape is known to match
        return {tuple(shape)}
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    dropped = tuple(d for i, d in enumerate(shape) if i not in axes)
    return {tuple(shape), kept, dropped}


def group_kind(nodes: Iterable[Node]) -> str:
    """The kind of a group with these members (see KINDS)."""
    roles = {node_role(n) for n in nodes}
    if "extern" in roles:
        return "extern_epilogue"
    if "reduction" in roles:
        return "reduction"
    if roles == {"pointwise"}:
        return "pointwise"
    return "opaque"


def fusion_problem(nodes: list[Node], uses: dict, *, shared_prologues: bool = False) -> str | None:
    """Why `nodes` (topologically ordered) cannot be one group, or None if they can.

    Checks the kind rules only (not size, not cycles through other groups). `uses` maps
    each tensor to its (node, input index) readers (`mdsl.ir.rewrite.use_map`).
    """
    roles = [node_role(n) for n in nodes]
    if len(nodes) > 1 and any(r not in ("pointwise", "reduction", "extern") for r in roles):
        return "an opaque or data-movement op is never fused"
    if roles.count("extern") > 1:
        return "two extern anchors"
    if "extern" in roles:
        return _extern_problem(nodes, roles)
    if "reduction" in roles:
        return _reduction_problem(nodes, roles, None if shared_prologues else uses)
    shapes = {_out_shape(n) for n in nodes}
    return (
        None
        if len(shapes) <= 1
        else f"pointwise ops of different shapes {sorted(map(str, shapes))}"
    )


def _out_shape(node: Node) -> tuple:
    shapes = {t.shape for t in node.outputs}
    return next(iter(shapes)) if len(shapes) == 1 else ("mixed",)


def _extern_problem(nodes: list[Node], roles: list[str]) -> str | None:
    if "reduction" in roles:
        return "a reduction cannot join an extern anchor's epilogue"
    anchor = nodes[roles.index("extern")]
    after_anchor = {anchor}
    for node in nodes:
        if node is anchor:
            continue
        if not any(t is not None and t.producer in after_anchor for t in node.inputs):
            return f"{node.name} is not downstream of the anchor {anchor.name}"
        if _out_shape(node) != anchor.outputs[0].shape:
            return f"{node.name} has not the anchor's output shape"
        after_anchor.add(node)
    return None


def _reduction_problem(nodes: list[Node], roles: list[str], uses: dict | None) -> str | None:
    spaces = {reduction_space(n) for n, r in zip(nodes, roles) if r == "reduction"}
    if len(spaces) > 1:
        return "reductions over different shapes or axes"
    allowed = space_shapes(next(iter(spaces)))
    allowed |= {_out_shape(n) for n, r in zip(nodes, roles) if r == "reduction"}
    members = set(nodes)
    downstream_of_reduction: set[Node] = set()
    for node, role in zip(nodes, roles):
        reads_reduced = any(
            t is not None and t.producer in downstream_of_reduction for t in node.inputs
        )
        if role == "reduction" or reads_reduced:
            downstream_of_reduction.add(node)
        if role != "pointwise":
            continue
        if _out_shape(node) not in allowed:
            return f"{node.name} has neither the reduction's full nor its reduced shape"
        outside = uses is not None and _read_outside(node, members, uses)
        if node not in downstream_of_reduction and outside:
            return f"prologue {node.name} is also read outside the group"
    return None


def _read_outside(node: Node, members: set, uses: dict) -> bool:
    return any(reader not in members for t in node.outputs for reader, _ in uses.get(t, ()))


# -- the greedy grouping ---------------------------------------------------------------------
class _Group:
    """A group while the pass grows it: members, and the nodes it depends on (bitsets)."""

    __slots__ = ("ancestors", "bits", "members", "role_rank")

    def __init__(self, node: Node, bit: int, ancestors: int):
        self.members = [node]
        self.bits = bit
        self.ancestors = ancestors
        self.role_rank = _ROLE_RANK.get(node_role(node), 3)


# Producer groups are tried anchors first: extern, then reduction, then pointwise.
_ROLE_RANK = {"extern": 0, "reduction": 1, "pointwise": 2}


class _Grouper:
    def __init__(self, g: Graph, max_group_size: int):
        self.g = g
        self.max_size = max_group_size
        self.uses = use_map(g)
        self.position = {node: i for i, node in enumerate(g)}
        self.group_of: dict[Node, _Group] = {}
        self.live: list[_Group] = []

    def run(self) -> list[list[Node]]:
        for node in self.g:
            if node_role(node) != "structural":
                self._place(node)
        groups = [sorted(grp.members, key=self.position.__getitem__) for grp in self.live]
        return sorted(groups, key=lambda members: self.position[members[0]])

    def _place(self, node: Node) -> None:
        producers = self._producer_groups([node])
        ancestors = 0
        for p in producers:
            ancestors |= p.bits | p.ancestors
        group = _Group(node, 1 << self.position[node], ancestors)
        self.group_of[node] = group
        self.live.append(group)
        if group.role_rank == 3:
            return  # opaque: never fused
        for producer in sorted(producers, key=lambda p: p.role_rank):
            if self._can_merge(producer, group):
                group = self._merge(producer, group)

    def _producer_groups(self, members: list[Node]) -> list[_Group]:
        """Distinct groups producing inputs of `members`, in order of first use."""
        seen: dict[int, _Group] = {}
        for node in members:
            for t in node.inputs:
                grp = None if t is None else self.group_of.get(t.producer)
                if grp is not None and grp.members[0] not in members:
                    seen.setdefault(id(grp), grp)
        return list(seen.values())

    def _can_merge(self, a: _Group, b: _Group) -> bool:
        if a is b or len(a.members) + len(b.members) > self.max_size:
            return False
        if a.role_rank == 3 or b.role_rank == 3:
            return False
        if self._path_through_other(a, b) or self._path_through_other(b, a):
            return False
        union = sorted(a.members + b.members, key=self.position.__getitem__)
        return fusion_problem(union, self.uses) is None

    def _path_through_other(self, src: _Group, dst: _Group) -> bool:
        """Whether a path src -> X -> ... -> dst runs through a group X other than both."""
        for p in self._producer_groups(dst.members):
            if p is not src and p.ancestors & src.bits:
                return True
        return False

    def _merge(self, a: _Group, b: _Group) -> _Group:
        a.members += b.members
        a.bits |= b.bits
        a.ancestors = (a.ancestors | b.ancestors) & ~a.bits
        a.role_rank = min(a.role_rank, b.role_rank)
        for node in b.members:
            self.group_of[node] = a
        self.live.remove(b)
        for other in self.live:  # whoever depended on a part now depends on the whole
            if other is not a and other.ancestors & a.bits:
                other.ancestors |= a.bits | a.ancestors
        return a


def assign_fusion_groups(g: Graph, *, max_group_size: int = DEFAULT_MAX_GROUP_SIZE) -> int:
    """Set `fusion_group` on every node of `g` and its subgraphs; returns the group count.

    Structural nodes (Input, Const, Output) get None. Previous groups are discarded.
    """
    count = 0
    for sub in all_graphs(g):
        for node in sub:
            node.fusion_group = None
        for members in _Grouper(sub, max_group_size).run():
            for node in members:
                node.fusion_group = f"{GROUP_PREFIX}{count}"
            count += 1
    return count


@register("fuse", levels=(2, 3), phase="fusion")
def fuse(g: Graph) -> PassResult:
    """Fusion grouping: record on each node the kernel (fusion group) it belongs to.

    Pointwise chains, reductions with their prologue and epilogue, and GEMM/conv anchors
    with a pointwise epilogue; see `mdsl.passes.fusion` for the rules.
    """
    before = {id(n): n.fusion_group for sub in all_graphs(g) for n in sub}
    count = assign_fusion_groups(g)
    changed = any(before[id(n)] != n.fusion_group for sub in all_graphs(g) for n in sub)
    fused = sum(1 for grp in fusion_groups(g) if len(grp) > 1)
    return PassResult(g, changed, f"{count} group(s), {fused} of more than one node")


# -- reading the annotation back -------------------------------------------------------------
def fusion_groups(g: Graph) -> list[FusionGroup]:
    """The fusion groups recorded on the nodes of `g` (not its subgraphs), in topological
    order of their first node. Nodes without a `fusion_group` belong to none."""
    uses = use_map(g)
    by_id: dict[str, list[Node]] = {}
    for node in g:
        if node.fusion_group is not None:
            by_id.setdefault(node.fusion_group, []).append(node)
    return [_describe(gid, members, uses) for gid, members in by_id.items()]


def _describe(gid: str, members: list[Node], uses: dict) -> FusionGroup:
    inside = set(members)
    produced = {t for n in members for t in n.outputs}
    inputs: dict[Tensor, None] = {}
    for node in members:
        for t in node.inputs:
            if t is not None and t not in produced:
                inputs.setdefault(t, None)
    outputs = tuple(
        t
        for n in members
        for t in n.outputs
        if any(reader not in inside for reader, _ in uses.get(t, ()))
    )
    return FusionGroup(gid, group_kind(members), tuple(members), tuple(inputs), outputs)


def fusion_group_problems(g: Graph, *, shared_prologues: bool = False) -> list[str]:
    """What is wrong with the groups recorded on `g`: kind rules broken, or groups that
    depend on each other in a cycle (they could not run as kernels in any order).
    `shared_prologues=True` accepts a reduction's prologue read outside its group (the
    code generator materializes it; the pass avoids it only to compute nothing twice)."""
    uses = use_map(g)
    groups = fusion_groups(g)
    problems = [
        f"{n.name} ({n.op_type}) is in group {n.fusion_group}; {n.op_type} nodes are never grouped"
        for n in g
        if n.op_type in STRUCTURAL and n.fusion_group is not None
    ]
    for grp in groups:
        why = fusion_problem(list(grp.nodes), uses, shared_prologues=shared_prologues)
        if why:
            problems.append(f"group {grp.id} ({grp.kind}): {why}")
    stuck = _group_cycle(g, groups)
    if stuck:
        problems.append(f"groups depend on each other in a cycle: {', '.join(stuck)}")
    return problems


def _group_cycle(g: Graph, groups: list[FusionGroup]) -> list[str]:
    """Ids of groups on (or behind) a cycle of the group graph, where an ungrouped node is
    a group of its own (a path out of a group and back through one makes a cycle too);
    empty if it is acyclic."""

    def group_of(node: Node) -> str:
        return node.fusion_group if node.fusion_group is not None else f"\0{node.name}"

    succ: dict[str, set[str]] = {group_of(n): set() for n in g}
    for node in g:
        for t in node.inputs:
            src, dst = (None, None) if t is None else (group_of(t.producer), group_of(node))
            if src in succ and src != dst:
                succ[src].add(dst)
    indegree = dict.fromkeys(succ, 0)
    for targets in succ.values():
        for dst in targets:
            indegree[dst] += 1
    ready = [gid for gid, d in indegree.items() if d == 0]
    while ready:
        for dst in succ[ready.pop()]:
            indegree[dst] -= 1
            if indegree[dst] == 0:
                ready.append(dst)
    return [gid.lstrip("\0") for gid, d in indegree.items() if d > 0]
