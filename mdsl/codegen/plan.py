"""The Plan: what runs, in which order, over which memory.

Built from a static-shape graph whose nodes carry fusion groups: groups are ordered
topologically, lowered to Kernel IR (falling back node by node, then to Python
callbacks), every materialized tensor gets a buffer, and intermediate buffers are placed
in one arena by the memory planner. Every target renders from the Plan alone.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from mdsl.codegen import kir
from mdsl.codegen.custom_c import c_binding, lower_custom_call
from mdsl.codegen.lower import (
    Context,
    Unsupported,
    expr_binding,
    lower_callback,
    lower_movement,
    lower_pointwise,
)
from mdsl.codegen.lower_extern import lower_conv, lower_gemm, lower_pool
from mdsl.codegen.lower_rows import lower_rows
from mdsl.codegen.memory import Buffer, MemoryPlan, plan_memory
from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import use_map
from mdsl.passes.fusion import fusion_groups, group_kind, node_role

MOVEMENT = (
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Dropout",
    "Transpose",
    "Expand",
    "Slice",
    "Concat",
)


@dataclass(slots=True)
class BufferSpec:
    """One buffer of the compiled graph. `kind` is input, output, const, arena or scratch;
    `slot` is the index in the inputs/outputs/constants arrays (arena: unused)."""

    name: str
    tensor: str
    dtype: DType
    elements: int
    kind: str
    slot: int = 0

    @property
    def nbytes(self) -> int:
        return self.elements * self.dtype.itemsize


@dataclass(slots=True)
class Plan:
    graph: Graph
    kernels: list = field(default_factory=list)
    buffers: dict[str, BufferSpec] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # graph input names, slot order
    outputs: list[str] = field(default_factory=list)  # graph output names, slot order
    constants: list[np.ndarray] = field(default_factory=list)
    callbacks: list[Node] = field(default_factory=list)
    memory: MemoryPlan | None = None
    fallbacks: list[str] = field(default_factory=list)  # why groups were split or called back

    def buffer(self, name: str) -> BufferSpec:
        return self.buffers[name]


@dataclass(slots=True)
class _Group:
    nodes: list[Node]
    outputs: list[Tensor]
    kind: str


def build_plan(g: Graph, *, c_bindings: bool = False) -> Plan:
    """Plan a static-shape graph (fusion groups read from the nodes).

    With `c_bindings` (a target that links C), a node whose op has a "c" binding becomes
    a call of that function, which wins over every generated form of the op."""
    _check_static(g)
    plan = Plan(g)
    builder = _PlanBuilder(plan, c_bindings)
    builder.assign_io_buffers()
    for group in ordered_groups(g):
        plan.kernels.extend(builder.lower_group(group))
    builder.copy_aliased_outputs()
    plan.memory = builder.plan_arena()
    return plan


def _check_static(g: Graph) -> None:
    """Every tensor of the schedule has a static shape (subgraphs aside: they run in the
    interpreter); a data-dependent dim cannot be planned into an arena."""
    for node in g:
        for t in node.outputs:
            if not t.type.is_static:
                raise CompileError(
                    f"output {t.name} has shape {t.type.describe()}, known only at run "
                    "time; compiled backends plan static shapes: run this graph with "
                    "mdsl.interpret (or backend='python')",
                    node=node.name,
                    op_type=node.op_type,
                    source=node.source,
                )


def ordered_groups(g: Graph) -> list[_Group]:
    """Fusion groups (singletons for ungrouped nodes) in a topological order."""
    uses = use_map(g)
    groups: list[_Group] = []
    grouped = {}
    for fg in fusion_groups(g):
        grp = _Group(list(fg.nodes), list(fg.outputs), fg.kind)
        groups.append(grp)
        for n in fg.nodes:
            grouped[n] = grp
    for node in g:
        if node.op_type in (INPUT, CONST, OUTPUT) or node in grouped:
            continue
        outs = [t for t in node.outputs if uses.get(t)]
        grp = _Group([node], outs, group_kind([node]))
        groups.append(grp)
        grouped[node] = grp
    return _toposort(groups, grouped, {n: i for i, n in enumerate(g)})


def _toposort(groups, group_of, position) -> list[_Group]:
    deps = {id(grp): set() for grp in groups}
    users = {id(grp): [] for grp in groups}
    for grp in groups:
        for node in grp.nodes:
            for t in node.inputs:
                if t is not None and t.producer in group_of and group_of[t.producer] is not grp:
                    producer = group_of[t.producer]
                    if id(producer) not in deps[id(grp)]:
                        deps[id(grp)].add(id(producer))
                        users[id(producer)].append(grp)
    first = {id(grp): min(position[n] for n in grp.nodes) for grp in groups}
    ready = [(first[id(grp)], i, grp) for i, grp in enumerate(groups) if not deps[id(grp)]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, _i, grp = heapq.heappop(ready)
        order.append(grp)
        for user in users[id(grp)]:
            deps[id(user)].discard(id(grp))
            if not deps[id(user)]:
                heapq.heappush(ready, (first[id(user)], groups.index(user), user))
    return order


class _PlanBuilder:
    def __init__(self, plan: Plan, c_bindings: bool = False):
        self.plan = plan
        self.c_bindings = c_bindings
        self.of_tensor: dict[Tensor, str] = {}
        self.output_copies: list[tuple[str, Tensor]] = []
        self.ctx = Context(self.buffer_of, self.scratch, self.callback)
        self.scratch_step: dict[str, int] = {}

    # -- buffers ------------------------------------------------------------------------------
    def _add(self, name: str, t: Tensor | None, dtype: DType, elements: int, kind: str, slot=0):
        spec = BufferSpec(name, t.name if t is not None else name, dtype, elements, kind, slot)
        self.plan.buffers[name] = spec
        return name

    def assign_io_buffers(self) -> None:
        g, plan = self.plan.graph, self.plan
        for i, (name, t) in enumerate(g.inputs.items()):
            plan.inputs.append(name)
            self.of_tensor[t] = self._add(f"in{i}", t, t.dtype, _numel(t), "input", i)
        for node in g.constants:
            t = node.outputs[0]
            slot = len(plan.constants)
            plan.constants.append(np.ascontiguousarray(node.const_value()))
            self.of_tensor[t] = self._add(f"c{slot}", t, t.dtype, _numel(t), "const", slot)
        for i, (name, t) in enumerate(g.outputs.items()):
            plan.outputs.append(name)
            buf = self._add(f"out{i}", t, t.dtype, _numel(t), "output", i)
            if t in self.of_tensor:  # an input, constant or another output: copy at the end
                self.output_copies.append((buf, t))
            else:
                self.of_tensor[t] = buf

    def buffer_of(self, t: Tensor) -> str:
        if t not in self.of_tensor:
            name = f"t{len(self.of_tensor)}"
            self.of_tensor[t] = self._add(name, t, t.dtype, _numel(t), "arena")
        return self.of_tensor[t]

    def scratch(self, elements: int, dtype: DType) -> str:
        name = f"scratch{len(self.scratch_step)}"
        self.scratch_step[name] = len(self.plan.kernels)
        return self._add(name, None, dtype, elements, "scratch")

    def callback(self, node: Node) -> int:
        self.plan.callbacks.append(node)
        return len(self.plan.callbacks) - 1

    # -- lowering with fallbacks ------------------------------------------------------------------
    def lower_group(self, group: _Group) -> list:
        try:
            if self.c_bindings and any(c_binding(n) for n in group.nodes):
                raise Unsupported("a member is bound to a C function")
            return _lower_whole(self.ctx, group)
        except Unsupported as why:
            if len(group.nodes) > 1:
                self.plan.fallbacks.append(f"group of {_ops(group.nodes)} split: {why}")
            kernels = []
            uses = use_map(self.plan.graph)
            for node in group.nodes:
                outs = [t for t in node.outputs if uses.get(t)]
                kernels.extend(self._lower_single(node, outs))
            return kernels

    def _lower_single(self, node: Node, outputs: list[Tensor]) -> list:
        if self.c_bindings and c_binding(node):
            return [lower_custom_call(self.ctx, node)]
        try:
            return _lower_whole(self.ctx, _Group([node], outputs, group_kind([node])))
        except Unsupported as why:
            self.plan.fallbacks.append(f"{node.name} ({node.op_type}) runs in Python: {why}")
            return [lower_callback(self.ctx, node)]

    def copy_aliased_outputs(self) -> None:
        from mdsl.codegen.access import contiguous
        from mdsl.expr import var

        for buf, t in self.output_copies:
            shape = tuple(t.shape)
            self.plan.kernels.append(
                kir.Pointwise(
                    f"k_copy_{buf}",
                    [kir.NodeRef(f"Output of {t.name}", "Copy", None)],
                    shape,
                    {"src": contiguous(self.buffer_of(t), t.dtype, shape)},
                    [],
                    [kir.Store(contiguous(buf, t.dtype, shape), var("src"))],
                )
            )

    # -- memory -----------------------------------------------------------------------------------
    def plan_arena(self) -> MemoryPlan:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for step, kernel in enumerate(self.plan.kernels):
            reads, writes = kernel_buffers(kernel)
            for b in writes:
                first.setdefault(b, step)
                last[b] = max(last.get(b, step), step)
            for b in reads:
                first.setdefault(b, step)
                last[b] = step
        buffers = []
        for name, spec in self.plan.buffers.items():
            if spec.kind not in ("arena", "scratch") or name not in first:
                continue
            buffers.append(Buffer(name, spec.nbytes, first[name], last[name]))
        return plan_memory(buffers, inplace=_inplace_candidates(self.plan, last))


def _lower_whole(ctx: Context, group: _Group) -> list:
    nodes, outs = group.nodes, group.outputs
    if any(_stored(n) for n in nodes):  # kernels index origin layouts; callbacks convert
        raise Unsupported("tensors stored in a non-origin layout")
    if group.kind == "pointwise":
        return [lower_pointwise(ctx, nodes, outs)]
    if group.kind == "reduction":
        return [lower_rows(ctx, nodes, outs)]
    if group.kind == "extern_epilogue":
        anchor = nodes[0]
        if node_role(anchor) != "extern":
            raise Unsupported("extern anchor is not first")
        if anchor.op_type == "Conv":
            return [lower_conv(ctx, nodes, outs)]
        return [lower_gemm(ctx, nodes, outs)]
    node = nodes[0]
    if len(nodes) == 1 and node.op_type in ("MaxPool", "AveragePool"):
        return [lower_pool(ctx, node)]
    if len(nodes) == 1 and node.op_type in MOVEMENT:
        return lower_movement(ctx, node)
    if len(nodes) == 1 and outs and expr_binding(node.op_type) is not None:
        return [lower_pointwise(ctx, nodes, outs)]  # e.g. a user op declared opaque
    raise Unsupported(f"no generated form for {_ops(nodes)}")


def kernel_buffers(k) -> tuple[set[str], set[str]]:
    """(buffers read, buffers written) by one kernel."""
    if isinstance(k, kir.Pointwise):
        return {a.buffer for a in k.loads.values()}, {s.access.buffer for s in k.stores}
    if isinstance(k, kir.Rowwise):
        writes = {p.access.buffer for p in k.phases if isinstance(p, (kir.Store, kir.RowStore))}
        return {a.buffer for a in k.loads.values()}, writes
    if isinstance(k, (kir.Gemm, kir.Conv)):
        reads = {k.a.buffer, k.b.buffer} if isinstance(k, kir.Gemm) else {k.x, k.w}
        writes = {k.out.buffer if isinstance(k, kir.Gemm) else k.out}
        if isinstance(k, kir.Conv) and k.scratch:
            writes.add(k.scratch)
        if k.epilogue is not None:
            reads |= {a.buffer for a in k.epilogue.loads.values()}
            writes |= {s.access.buffer for s in k.epilogue.stores}
        return reads, writes
    if isinstance(k, kir.Pool):
        return {k.x}, {k.out}
    if isinstance(k, (kir.Callback, kir.CustomCall)):
        return {b for b in k.inputs if b}, set(k.outputs)
    raise TypeError(f"unknown kernel {k!r}")


def _inplace_candidates(plan: Plan, last: dict[str, int]) -> dict[str, str]:
    """A pointwise store may reuse a load's arena buffer read at the same positions, when
    this kernel is that buffer's last reader."""
    out = {}
    for step, k in enumerate(plan.kernels):
        if not isinstance(k, kir.Pointwise) or len(k.stores) != 1:
            continue
        store = k.stores[0].access
        if plan.buffers[store.buffer].kind != "arena":
            continue
        for load in k.loads.values():
            spec = plan.buffers[load.buffer]
            reads_elsewhere = any(
                a.buffer == load.buffer and (a.offset, a.strides) != (store.offset, store.strides)
                for a in k.loads.values()
            )
            if spec.kind != "arena" or reads_elsewhere or last.get(load.buffer) != step:
                continue
            if spec.dtype.itemsize == store.dtype.itemsize:
                out[store.buffer] = load.buffer
                break
    return out


def _stored(node: Node) -> bool:
    from mdsl.ops.storage import stored_as

    return any(
        t is not None and stored_as(t.type) is not None for t in (*node.inputs, *node.outputs)
    )


def _numel(t: Tensor) -> int:
    """Elements of `t`'s buffer: its storage shape (padded in NC1HWC0, FRACTAL_NZ)."""
    n = 1
    for d in t.type.storage_shape:
        n *= int(d)
    return n


def _ops(nodes) -> str:
    return "+".join(n.op_type for n in nodes)
