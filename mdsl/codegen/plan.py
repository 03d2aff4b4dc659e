"""The Plan: what runs, in which order, over which memory.

Built from a graph whose nodes carry fusion groups: groups are ordered topologically,
lowered to Kernel IR (falling back node by node, then to Python callbacks), every
materialized tensor gets a buffer, and intermediate buffers are placed in one arena by
the memory planner. Every target renders from the Plan alone.

Control flow (`control_flow=True`): an If/Case/While node becomes one `kir.Branch` /
`kir.Loop` kernel holding a `kir.Block` per subgraph, each planned like a graph into the
same buffer table and arena (`mdsl.codegen.lower_control`). Memory lifetimes are nested
at the node's place in the schedule (`buffer_lifetimes`): steps number kernels in
preorder, the node's inputs, outputs and loop state live over all of its steps, and a
block's own buffers only within the block, so different branches, and a loop's cond and
body, share memory.

Symbolic dims (`symbolic=True`): shapes may hold `mdsl.ir.dim.Dim` expressions of the
feeds' symbols and of control-flow nodes' dynamic dims. Lowering keeps them in Kernel IR
(shapes, strides, offsets, GEMM sizes) and in buffer sizes; each symbol gets a slot and
is renamed to the slot's identifier (`dim0`, ...), which targets render as run-time
values (C: locals of `mdsl_run_dims` read from its `dims` array and passed to the kernels
that use them; numba: driver variables). Memory is then planned per shape signature at
run time: `Plan.layout(values)` runs the memory planner on the buffer sizes evaluated for
the feeds' symbols (dynamic dims at their bound: `DynamicBound`), and the generated code
reads each arena buffer's offset from an `offsets` array (`mdsl.targets.signatures`
caches layouts per signature). A kernel whose lowering needs an int where a feed's symbol
stands (a convolution window over a symbolic spatial dim) raises `NotSymbolic`: the
executable then specializes the whole graph per signature instead; one that needs an int
where only a dynamic dim stands runs as a Python callback. A plan without symbols is
planned as before, its memory computed once (`Plan.memory`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import xxhash

from mdsl.codegen import kir
from mdsl.codegen.blocked import keep_blocked
from mdsl.codegen.concat_in_place import View, drop_concat_copies, roots
from mdsl.codegen.copy_forwarding import forward_run_copies
from mdsl.codegen.dims import evaluate_size, free_symbols, rename_symbols
from mdsl.codegen.lower import (
    Context,
    Unsupported,
    expr_binding,
    lower_callback,
    lower_movement,
    lower_pointwise,
)
from mdsl.codegen.lower_custom import c_binding, lower_custom_call
from mdsl.codegen.lower_extern import lower_conv, lower_gemm, lower_pool
from mdsl.codegen.lower_indexing import lower_indexing
from mdsl.codegen.lower_rows import lower_rows
from mdsl.codegen.memory import Buffer, LayoutTemplate, MemoryPlan, layout_template, plan_memory
from mdsl.codegen.strided_operands import read_in_place
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError, ShapeError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import use_map
from mdsl.ops.dynamic import dynamic_bounds, dynamic_symbols
from mdsl.ops.runtime_sizes import is_value_binder, value_symbols
from mdsl.passes.fusion import fusion_group_problems, fusion_groups, group_kind, node_role

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
    elements: int | Dim | tuple  # a tuple: the largest of its members (loop state)
    # ... or "pointer": a name the generated code points at other buffers; "view": bytes
    # of another buffer (`Plan.views`)
    kind: str
    slot: int = 0

    @property
    def nbytes(self) -> int | Dim:
        if isinstance(self.elements, tuple):
            raise CompileError(f"buffer {self.name} has no single size expression")
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
    # symbolic plans (see the module doc): symbol names by slot, dynamic dims' bounds,
    # buffer lifetimes and in-place pairs for planning memory at run time
    symbols: list[str] = field(default_factory=list)
    input_symbols: list[str] = field(default_factory=list)
    # symbols ValueDims nodes read off tensor values: bound before the run (from the
    # feeds, `mdsl.targets.signatures`), like the feeds' symbols
    value_symbols: list[str] = field(default_factory=list)
    # capacities of the symbols ValueDims nodes inside control flow bind each time their
    # block runs (`capacity_symbol`): bound before the run too, grown when exceeded
    # (and of loop-carried dims whose bound is too large to plan at): capacity symbol ->
    # its first value
    capacities: dict[str, int] = field(default_factory=dict)
    bounds: list[DynamicBound] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    lifetimes: dict[str, tuple[int, int]] = field(default_factory=dict)
    inplace: dict[str, str] = field(default_factory=dict)
    # Concat inputs written straight into their Concat's output (`concat_in_place`):
    # buffer (kind "view") -> where it lies
    views: dict[str, View] = field(default_factory=dict)
    # a symbolic plan's placement planned at compile time, reused per signature
    layout_template: LayoutTemplate | None = None
    # what gives `kernels` back when first read (`defer_kernels`), else None
    kernel_loader: Callable[[], list] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __getattr__(self, name: str):
        """Reached only for an unset slot: the kernels of a plan that deferred them."""
        if name != "kernels":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        loader = object.__getattribute__(self, "kernel_loader")
        if loader is not None:  # threads reading at once may each load them: equal lists
            self.kernels = loader()
            self.kernel_loader = None
        return object.__getattribute__(self, "kernels")  # set here or by another reader

    def defer_kernels(self, loader: Callable[[], list]) -> None:
        """Drop the kernels until they are read, then take them from `loader()`: a plan
        loaded from the compile cache runs without them (unpickling BERT-base's 1,222
        kernels, ~11,000 records, is half of loading its plan)."""
        del self.kernels
        self.kernel_loader = loader

    def buffer(self, name: str) -> BufferSpec:
        return self.buffers[name]

    @property
    def is_symbolic(self) -> bool:
        """Whether sizes depend on dims known at run time (memory is then planned per
        shape signature by `layout`, and `memory` is None)."""
        return bool(self.symbols)

    @property
    def has_control_flow(self) -> bool:
        return any(isinstance(k, kir.Branch | kir.Loop) for k in self.kernels)

    @property
    def uses_dims(self) -> bool:
        """Whether the generated entry point takes a `dims` array (symbolic dims or control
        flow: the symbols' values, run-time arena offsets, a slot for a failed check's
        value): `mdsl_run_dims` in C, the `dims` arguments of numba's `run`."""
        return self.is_symbolic or self.has_control_flow

    def slots_bound_by(self, k: kir.Callback | kir.CustomCall) -> list[int]:
        """The symbol slots kernel `k` writes (a data-dependent node's sizes): generated
        code reloads them from `dims` after the call."""
        if isinstance(k, kir.CustomCall):
            return [int(size.symbol.name.removeprefix("dim")) for size in k.sizes]
        bound = dynamic_symbols(self.callbacks[k.index])
        return [i for i, s in enumerate(self.symbols) if s in bound]

    def all_kernels(self) -> list:
        """Every kernel, those inside control-flow blocks too, in preorder."""
        return kir.walk_kernels(self.kernels)

    @property
    def arena_buffers(self) -> list[str]:
        """The buffers placed in the arena, in the order of the `offsets` array."""
        return [n for n, s in self.buffers.items() if n in self.lifetimes and _in_arena(s)]

    def slot_values(self, values: Mapping[str, int]) -> dict[str, int]:
        """`values` (symbol -> size) keyed by slot identifier (`dim0`, ...)."""
        return {slot_name(i): values[s] for i, s in enumerate(self.symbols) if s in values}

    def _extremes(self, values: Mapping[str, int]) -> tuple[dict, dict]:
        """Slot values for the feeds' symbols `values`, with every dynamic dim at its
        largest size, and at its smallest (sizes are assumed monotonic in it)."""
        high, low = self.slot_values(values), self.slot_values(values)
        for bound in self.bounds:
            high[bound.symbol] = bound.upper(high, low)
            low[bound.symbol] = bound.lo
        return high, low

    def bound_values(self, values: Mapping[str, int]) -> tuple[dict, dict]:
        """(slot identifier -> value, symbol -> value): `values` with the dynamic dims
        at their largest sizes, to evaluate sizes of the plan / of its graph with."""
        high, _ = self._extremes(values)
        by_name = {
            s: high[slot_name(i)] for i, s in enumerate(self.symbols) if slot_name(i) in high
        }
        return high, {**values, **by_name}

    def sizes(self, values: Mapping[str, int]) -> dict[str, int]:
        """Elements of every buffer for the input symbols `values` (dynamic dims at the
        largest size they can take: their bound)."""
        high, low = self._extremes(values)
        return {
            name: max(evaluate_size(s.elements, high), evaluate_size(s.elements, low))
            for name, s in self.buffers.items()
        }

    def layout(self, values: Mapping[str, int], sizes: dict[str, int] | None = None) -> MemoryPlan:
        """The memory plan for input symbols `values`: every arena buffer at its size
        (`sizes`: `self.sizes(values)`, when the caller has them)."""
        sizes = self.sizes(values) if sizes is None else sizes
        nbytes = self._arena_bytes(sizes)
        if self.layout_template is not None:
            memory = self.layout_template.apply(nbytes)
            if memory is not None:
                return memory
        return plan_memory(self._arena_sized(nbytes), inplace=self.inplace)

    def plan_layout_template(self) -> None:
        """Plan a symbolic plan's memory now, at `TEMPLATE_SIZE` for every feed's symbol,
        as the template `layout` reuses at every signature where it holds (sizes that
        grow alike: a batch, a sequence); not for dims bound by the run itself."""
        if not self.is_symbolic or self.bounds or self.value_symbols or self.capacities:
            return
        nbytes = self._arena_bytes(self.sizes(_template_values(self.graph, self.input_symbols)))
        self.layout_template = layout_template(self._arena_sized(nbytes), inplace=self.inplace)

    def _arena_bytes(self, sizes: Mapping[str, int]) -> list[int]:
        """Bytes of each arena buffer (`arena_buffers` order) at element counts `sizes`."""
        return [sizes[name] * self.buffers[name].dtype.itemsize for name in self.arena_buffers]

    def _arena_sized(self, nbytes: list[int]) -> list[Buffer]:
        return [Buffer(n, size, *self.lifetimes[n]) for n, size in zip(self.arena_buffers, nbytes)]


@dataclass(frozen=True, slots=True)
class DynamicBound:
    """The largest size a control-flow node's dynamic dim `symbol` (a slot name) can take:
    the declared `hi` of a loop-carried dim, or the largest of `candidates` (each
    branch's size for it, dims of other symbols); `lo` is its declared minimum."""

    symbol: str
    lo: int
    hi: int | None
    candidates: tuple = ()
    capacity: str | None = None  # a capacity symbol (slot name) the size is planned at most

    def upper(self, high: Mapping[str, int], low: Mapping[str, int]) -> int:
        if not self.candidates:
            largest = int(self.hi)
        else:
            largest = max(evaluate_size(c, env) for c in self.candidates for env in (high, low))
        return largest if self.capacity is None else min(largest, high[self.capacity])


@dataclass(frozen=True, slots=True)
class Failure:
    """A run-time check of the generated code: status `base + index` reports `message`
    (`{value}` in it: the offending value the code stored) for `node`."""

    message: str
    node: kir.NodeRef
    capacity: str | None = None  # a capacity exceeded (the run grows it and runs again)


class NotSymbolic(CompileError):
    """A kernel cannot be generated with its symbolic dims (the caller specializes)."""


FIRST_CAPACITY = 64  # a value dim bound inside control flow is first planned this large
FIRST_ROWS = 4096  # loop-carried dims bounded by more are first planned this large


def capacity_symbol(symbol: str) -> str:
    """The symbol holding how large value dim `symbol` (bound inside a control-flow
    block) may be in this run's memory layout."""
    return f"{symbol}_capacity"


def slot_name(index: int) -> str:
    """The identifier of symbol slot `index` in generated code."""
    return f"dim{index}"


def _in_arena(spec: BufferSpec) -> bool:
    return spec.kind in ("arena", "scratch")


@dataclass(slots=True)
class _Group:
    nodes: list[Node]
    outputs: list[Tensor]
    kind: str


def build_plan(
    g: Graph,
    *,
    c_bindings: bool = False,
    control_flow: bool = False,
    symbolic: bool = False,
    indexed: bool = False,
) -> Plan:
    """Plan a graph (fusion groups read from the nodes).

    With `c_bindings` (a target that links C), a node whose op has a "c" binding becomes
    a call of that function, which wins over every generated form of the op. With
    `control_flow`, If/Case/While nodes become `kir.Branch`/`kir.Loop` kernels holding
    their planned subgraphs (else Python callbacks). With `symbolic`, shapes may hold
    symbolic dims (see the module doc); else every shape must be static. With `indexed`
    (a target rendering `kir.Indexed`), gathers, scatters, scans, TopK, arg reductions
    and Pad become kernels (`mdsl.codegen.lower_indexing`) instead of callbacks."""
    if symbolic:
        _check_bound(g, control_flow)
    else:
        _check_static(g)
    hand_written: frozenset[str] = frozenset()
    for _ in range(4):  # convolutions oneDNN gains nothing on are planned again without it
        plan = Plan(g)
        builder = _PlanBuilder(plan, c_bindings, control_flow)
        builder.ctx.indexed = indexed
        builder.ctx.hand_written = hand_written
        builder.assign_io_buffers()
        plan.kernels.extend(builder.lower_graph(g))
        builder.copy_aliased_outputs()
        lonely = keep_blocked(plan, lambda k: kernel_buffers(k)[0]) if c_bindings else []
        if not lonely:
            break
        hand_written |= frozenset(lonely)
    _name_symbol_slots(plan)
    if c_bindings:
        drop_concat_copies(plan, kernel_buffers)
        forward_run_copies(plan, kernel_buffers)
    plan.lifetimes, steps = buffer_lifetimes(plan.kernels)
    plan.lifetimes = _views_in_roots(plan, plan.lifetimes)
    plan.inplace = _inplace_candidates(plan, steps)
    if not plan.is_symbolic:
        plan.memory = plan.layout({})
    plan.plan_layout_template()
    return plan


def _views_in_roots(plan: Plan, lifetimes: dict[str, tuple[int, int]]) -> dict:
    """`lifetimes` of the plan's buffers, each view's folded into its root's: the root
    lives from the first write of any of them to the last read."""
    out = {b: life for b, life in lifetimes.items() if b in plan.buffers}
    for name, view in plan.views.items():
        life = out.pop(name, None)
        if life is not None:
            start, end = out.get(view.root, life)
            out[view.root] = (min(start, life[0]), max(end, life[1]))
    return out


TEMPLATE_SIZE = 64  # each feed's symbol, within its range, when a template is planned


def _template_values(g: Graph, symbols: list[str]) -> dict[str, int]:
    """A size for each symbol in `symbols`: TEMPLATE_SIZE within the range its inputs
    declare."""
    values = dict.fromkeys(symbols, TEMPLATE_SIZE)
    for t in g.inputs.values():
        for d in t.shape:
            if isinstance(d, Dim) and d.name in values:
                top = TEMPLATE_SIZE if d.max is None else min(d.max, values[d.name])
                values[d.name] = max(d.min, top)
    return values


def _check_bound(g: Graph, control_flow: bool) -> None:
    """Every dim of the schedule is known when its tensor is made: an int, or built from
    symbols the feeds bind or (with `control_flow`) a control-flow node's dynamic dims."""
    from mdsl.ir.rewrite import all_graphs
    from mdsl.ops.control_flow import is_control_flow

    known = {s for t in g.inputs.values() for s in free_symbols(tuple(t.shape))}
    for sub in all_graphs(g) if control_flow else [g]:
        known |= {s for n in sub if is_control_flow(n) for s in n.attrs.get("dynamic") or ()}
        known |= {s for n in sub for s in _bounded_symbols(n)}
    known |= {s for n in g for s in value_symbols(n)}  # bound before the run
    if control_flow:  # bound where they run: their control-flow node is a callback
        known |= {s for sub in all_graphs(g) for n in sub for s in value_symbols(n)}
    for sub in all_graphs(g) if control_flow else [g]:
        for node in sub:
            for t in node.outputs:
                unknown = free_symbols(tuple(t.type.storage_shape)) - known
                if unknown:
                    raise CompileError(
                        f"output {t.name} has shape {t.type.describe()}, known only at run "
                        f"time ({', '.join(sorted(unknown))} bound by no input); compiled "
                        "backends plan buffers from the inputs' dims: run this graph with "
                        "mdsl.interpret (or backend='python')",
                        node=node.name,
                        op_type=node.op_type,
                        source=node.source,
                    )


def _bounded_symbols(node: Node) -> list[str]:
    """The data-dependent symbols of `node` that have an upper bound (docs/dynamic-shapes.md):
    compiled backends size their buffers by it; an unbounded one stays unknown."""
    return [s for s, bound in dynamic_bounds(node).items() if bound is not None]


def _name_symbol_slots(plan: Plan) -> None:
    """Give every symbol of the plan a slot (the feeds' symbols first) and rename it to
    the slot's identifier in kernels, buffer sizes and bounds."""
    g = plan.graph
    inputs = []
    for t in g.inputs.values():
        for d in t.shape:
            for s in sorted(free_symbols(d)):
                if s not in inputs:
                    inputs.append(s)
    used = free_symbols(plan.kernels) | free_symbols(plan.buffers) | free_symbols(plan.bounds)
    values = [s for n in g for s in value_symbols(n)] + list(plan.capacities)
    inputs += [s for s in values if s not in inputs]
    dynamic = [b.symbol for b in plan.bounds]
    rest = sorted(used - set(inputs) - set(dynamic))
    plan.symbols = inputs + [s for s in dynamic if s not in inputs] + rest
    plan.input_symbols = inputs[: len(inputs) - len(values)]
    plan.value_symbols = values
    if not plan.symbols:
        return
    names = {s: slot_name(i) for i, s in enumerate(plan.symbols)}
    plan.kernels = rename_symbols(plan.kernels, names)
    plan.buffers = rename_symbols(plan.buffers, names)
    plan.bounds = rename_symbols(plan.bounds, names)
    plan.bounds = [
        DynamicBound(names[b.symbol], b.lo, b.hi, b.candidates, names.get(b.capacity))
        for b in plan.bounds
    ]


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
    """Fusion groups (singletons for ungrouped nodes) in a topological order; the groups
    recorded on `g` (perhaps by a file) are re-checked with the fusion pass's rules."""
    problems = fusion_group_problems(g, shared_prologues=True)
    if problems:
        raise CompileError(
            f"graph {g.name!r}: the fusion groups recorded on its nodes cannot be compiled: "
            f"{problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            + "; clear node.fusion_group, or let mdsl.optimize regroup (opt_level=2)"
        )
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
    index = {id(grp): i for i, grp in enumerate(groups)}
    ready = [(first[id(grp)], i, grp) for i, grp in enumerate(groups) if not deps[id(grp)]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, _i, grp = heapq.heappop(ready)
        order.append(grp)
        for user in users[id(grp)]:
            deps[id(user)].discard(id(grp))
            if not deps[id(user)]:
                heapq.heappush(ready, (first[id(user)], index[id(user)], user))
    return order


class _PlanBuilder:
    def __init__(self, plan: Plan, c_bindings: bool = False, control_flow: bool = False):
        self.plan = plan
        self.c_bindings = c_bindings
        self.control_flow = control_flow
        self.of_tensor: dict[Tensor, str] = {}
        self.output_copies: list[tuple[str, Tensor]] = []
        derived = self.derived_constant if c_bindings else None
        self.ctx = Context(self.buffer_of, self.scratch, self.callback, derived)
        self.scratch_step: dict[str, int] = {}
        self.derived: dict[tuple, tuple[str, int]] = {}  # by content: buffer and slot

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

    def new_buffer(self, prefix: str, dtype: DType, elements, kind: str) -> str:
        """A buffer of no tensor (loop state, pointers), named `<prefix><n>`."""
        name = f"{prefix}{sum(1 for b in self.plan.buffers if b.startswith(prefix))}"
        return self._add(name, None, dtype, elements, kind)

    def assign_constants(self, g: Graph) -> None:
        """Buffers for the constants of subgraph `g` (the graph's own: `assign_io_buffers`)."""
        for node in g.constants:
            t = node.outputs[0]
            slot = len(self.plan.constants)
            self.plan.constants.append(np.ascontiguousarray(node.const_value()))
            self.of_tensor[t] = self._add(f"c{slot}", t, t.dtype, _numel(t), "const", slot)

    def derived_constant(self, value: np.ndarray, dtype: DType) -> str:
        """A constant buffer holding `value`, made from the graph's constants at plan time
        (a weight packed into the layout its kernel reads). Kernels deriving equal values
        share one buffer: ALBERT's 12 layers use one set of weights, and a copy packed per
        layer made 339 MiB of constants from 42, each layer's read from memory where ORT's
        one packed copy stayed in cache."""
        value = np.ascontiguousarray(value)
        key = (dtype, value.dtype.str, value.shape, xxhash.xxh3_128_digest(value))
        if key in self.derived:
            name, slot = self.derived[key]
            if np.array_equal(value, self.plan.constants[slot]):  # not a hash collision
                return name
        slot = len(self.plan.constants)
        self.plan.constants.append(value)
        name = self._add(f"c{slot}", None, dtype, int(value.size), "const", slot)
        self.derived[key] = (name, slot)
        return name

    def failure(self, node: Node, message: str, capacity: str | None = None) -> int:
        """Register a run-time check failing with `message` at `node` (or exceeding
        `capacity`, a capacity symbol); its index."""
        from mdsl.codegen.lower import node_ref

        self.plan.failures.append(Failure(message, node_ref(node), capacity))
        return len(self.plan.failures) - 1

    def scratch(self, elements: int, dtype: DType) -> str:
        name = f"scratch{len(self.scratch_step)}"
        self.scratch_step[name] = len(self.plan.kernels)
        return self._add(name, None, dtype, elements, "scratch")

    def callback(self, node: Node) -> int:
        self.plan.callbacks.append(node)
        return len(self.plan.callbacks) - 1

    # -- lowering with fallbacks ------------------------------------------------------------------
    def lower_graph(self, g: Graph) -> list:
        """The kernels of graph (or subgraph) `g`, in schedule order."""
        kernels = []
        uses = use_map(g)
        for group in ordered_groups(g):
            if self.c_bindings and _read_in_place(group, uses):
                continue  # its readers take its source with permuted strides
            kernels.extend(self.lower_group(group))
        return kernels

    def lower_group(self, group: _Group) -> list:
        try:
            _refuse_storage_types(group.nodes)
            if self.c_bindings and any(c_binding(n) for n in group.nodes):
                raise Unsupported("a member is bound to a C function")
            if any(_bounded_symbols(n) or self._binds_in_block(n) for n in group.nodes):
                raise Unsupported("a member's output sizes depend on its input values")
            return self._lower_symbolic(group, _lower_whole)
        except Unsupported as why:
            if len(group.nodes) > 1:
                self.plan.fallbacks.append(f"group of {_ops(group.nodes)} split: {why}")
            kernels = []
            uses = use_map(group.nodes[0].graph or self.plan.graph)
            for node in group.nodes:
                outs = [t for t in node.outputs if uses.get(t)]
                kernels.extend(self._lower_single(node, outs))
            return kernels

    def _lower_single(self, node: Node, outputs: list[Tensor]) -> list:
        single = _Group([node], outputs, group_kind([node]))
        if _bounded_symbols(node):
            return [self._lower_data_dependent(node)]
        if self._binds_in_block(node):
            return [self._lower_body_value_dims(node)]
        try:
            _refuse_storage_types([node])
            if self.c_bindings and c_binding(node):
                return self._lower_symbolic(
                    single, lambda _, g: [lower_custom_call(self.ctx, node)]
                )
            if self.control_flow and node.subgraphs:
                from mdsl.codegen.lower_control import lower_control_flow

                return [lower_control_flow(self, node)]
            return self._lower_symbolic(single, _lower_whole)
        except Unsupported as why:
            self.plan.fallbacks.append(f"{node.name} ({node.op_type}) runs in Python: {why}")
            return [lower_callback(self.ctx, node)]

    def _lower_data_dependent(self, node: Node) -> kir.Callback | kir.CustomCall:
        """A node whose output sizes its input values decide: its outputs' buffers are
        sized with each symbol at its bound. A node bound to a C function calls it, and
        the function reports the sizes (`kir.DataSize`); any other runs as a callback,
        which writes the symbols' actual values into the run's `dims`
        (`Plan.slots_bound_by`)."""
        for symbol, bound in dynamic_bounds(node).items():
            if bound is not None:
                self.plan.bounds.append(DynamicBound(symbol, 0, None, (bound,)))
        if self.c_bindings and c_binding(node) and not _storage_typed(node):
            return lower_custom_call(self.ctx, node, lambda why: self.failure(node, why))
        self.plan.fallbacks.append(
            f"{node.name} ({node.op_type}) runs in Python: its output sizes depend on its "
            "input values"
        )
        return lower_callback(self.ctx, node)

    def _binds_in_block(self, node: Node) -> bool:
        """A ValueDims node inside control flow: its values are known only when its
        block runs (at the top level they are bound before the run)."""
        return is_value_binder(node) and node.graph is not self.plan.graph

    def _lower_body_value_dims(self, node: Node) -> kir.Callback:
        """A ValueDims node inside a control-flow subgraph binds its symbols each time its
        block runs, from values known only then: it runs as a callback writing them into
        `dims`, and the buffers they size are planned at a capacity, a symbol bound
        before the run like a value dim (`capacity_symbol`). A value above its capacity
        makes the executable grow the capacity and run the call again
        (`mdsl.targets.signatures.PlanShapes`)."""
        for symbol in value_symbols(node):
            capacity = capacity_symbol(symbol)
            self.plan.capacities[capacity] = FIRST_CAPACITY
            self.plan.bounds.append(DynamicBound(symbol, 0, None, (Dim(capacity),)))
        self.plan.fallbacks.append(
            f"{node.name} ({node.op_type}) runs in Python: it binds sizes each time its block runs"
        )
        return lower_callback(self.ctx, node)

    def _lower_symbolic(self, group: _Group, lower) -> list:
        """`lower(ctx, group)`; a lowering that cannot handle the group's symbolic dims
        (an int needed, a size compared) raises NotSymbolic when the feeds' symbols are
        involved (the caller specializes the graph), else Unsupported (a callback runs
        the node: its dims are data-dependent, no specialization would fix them)."""
        try:
            return lower(self.ctx, group)
        except (ShapeError, TypeError) as e:
            symbols = _group_symbols(group.nodes)
            if not symbols:
                raise
            inputs = {s for t in self.plan.graph.inputs.values() for s in free_symbols(t.shape)}
            if symbols & inputs:
                raise NotSymbolic(
                    f"{_ops(group.nodes)} cannot be generated with symbolic dims "
                    f"({', '.join(sorted(symbols))}): {e}",
                    node=group.nodes[0].name,
                    op_type=group.nodes[0].op_type,
                ) from e
            raise Unsupported(f"dims known only at run time: {e}") from e

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


def _refuse_storage_types(nodes: list[Node]) -> None:
    """Kernels compute in real types; a node reading or writing a storage type (float8,
    int4, ...: `mdsl.ir.dtype`) runs as a callback."""
    for n in nodes:
        for t in (*n.inputs, *n.outputs):
            if t is not None and t.dtype.is_storage:
                raise Unsupported(f"{t.dtype} is a storage type (no kernel computes in it)")


def _storage_typed(node: Node) -> bool:
    try:
        _refuse_storage_types([node])
    except Unsupported:
        return True
    return False


def _group_symbols(nodes: list[Node]) -> set[str]:
    tensors = [t for n in nodes for t in (*n.inputs, *n.outputs) if t is not None]
    return free_symbols([tuple(t.type.storage_shape) for t in tensors])


# -- memory: buffer lifetimes over the schedule ----------------------------------------------------
def buffer_lifetimes(kernels: list) -> tuple[dict[str, tuple[int, int]], list[tuple[int, object]]]:
    """(buffer -> (first step, last step), [(step, kernel)] of the non-control-flow
    kernels). Steps number kernels in preorder; a control-flow kernel takes a step before
    its blocks and one after, a block one after its kernels (its copies, a loop's test).
    The node's inputs and outputs and a loop's state live from the first to the last
    step of the node: a loop reads its captures in every iteration, and which block
    writes an output is known only at run time. A block's own buffers live within the
    block, so the buffers of different branches, or of a loop's cond and body, may share
    memory: they never run at the same time."""
    spans: dict[str, list[int]] = {}
    steps: list[tuple[int, object]] = []
    counter = itertools.count()

    def use(buffer: str, *at: int) -> None:
        span = spans.setdefault(buffer, [at[0], at[0]])
        span[0], span[1] = min(span[0], *at), max(span[1], *at)

    def block(b: kir.Block) -> int:
        walk(b.kernels)
        end = next(counter)
        for c in b.copies:
            use(c.src, end)
            use(c.dst, end)
        return end

    def walk(ks: list) -> None:
        for k in ks:
            if isinstance(k, kir.Branch | kir.Loop):
                start = next(counter)
                held = [*k.reads, *k.outputs]
                if isinstance(k, kir.Loop):
                    held += [b for v in k.state for b in (v.first, v.second)]
                    held += [b for c in (*k.init, *k.final) for b in (c.src, c.dst)]
                    use(k.pred, block(k.cond))
                    block(k.body)
                else:
                    for b in k.blocks:
                        block(b)
                end = next(counter)
                for b in held:
                    use(b, start, end)
                continue
            step = next(counter)
            steps.append((step, k))
            reads, writes = kernel_buffers(k)
            for b in reads | writes:
                use(b, step)

    walk(kernels)
    return {b: (lo, hi) for b, (lo, hi) in spans.items()}, steps


def _lower_whole(ctx: Context, group: _Group) -> list:
    nodes, outs = group.nodes, group.outputs
    if any(_stored(n) for n in nodes):  # kernels index origin layouts; callbacks convert
        raise Unsupported("tensors stored in a non-origin layout")
    if group.kind == "pointwise":
        return [lower_pointwise(ctx, nodes, outs)]
    if len(nodes) == 1 and nodes[0].op_type in ("ArgMax", "ArgMin"):
        return lower_indexing(ctx, nodes[0], ctx.indexed)
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
    if len(nodes) == 1:
        return lower_indexing(ctx, node, ctx.indexed)
    raise Unsupported(f"no generated form for {_ops(nodes)}")


def _read_in_place(group: _Group, uses) -> bool:
    """A lone Transpose whose every reader is a GEMM reading its source in place."""
    if len(group.nodes) != 1 or group.nodes[0].op_type != "Transpose":
        return False
    node = group.nodes[0]
    return read_in_place(node, uses.get(node.outputs[0], []))


def kernel_buffers(k) -> tuple[set[str], set[str]]:
    """(buffers read, buffers written) by one kernel."""
    if isinstance(k, kir.Pointwise):
        return {a.buffer for a in k.loads.values()}, {s.access.buffer for s in k.stores}
    if isinstance(k, kir.Rowwise):
        writes = {p.access.buffer for p in k.phases if isinstance(p, (kir.Store, kir.RowStore))}
        return {a.buffer for a in k.loads.values()}, writes
    if isinstance(k, (kir.Gemm, kir.Conv)):
        reads = {k.a.buffer, k.b.buffer} if isinstance(k, kir.Gemm) else {k.x, k.w}
        packed = (k.packed_b,) if isinstance(k, kir.Gemm) else (k.packed_w, k.offsets)
        reads |= {b for b in packed if b}
        if isinstance(k, kir.Conv):
            reads |= {b for b in (k.bias, k.residual, k.winograd) if b}
            reads |= {w.buffer for w in k.onednn_weights}
        writes = {k.out.buffer if isinstance(k, kir.Gemm) else k.out}
        if isinstance(k, kir.Conv):
            writes |= {b for b in (k.scratch, k.x_copy) if b}
            writes |= {k.residual} if k.dst_in_residual else set()
        if k.epilogue is not None:
            reads |= {a.buffer for a in k.epilogue.loads.values()}
            writes |= {s.access.buffer for s in k.epilogue.stores}
        return reads, writes
    if isinstance(k, kir.Pool):
        return {k.x}, {k.out}
    if isinstance(k, (kir.Callback, kir.CustomCall, kir.Indexed)):
        return {b for b in k.inputs if b}, set(k.outputs)
    if isinstance(k, kir.Branch | kir.Loop):
        return set(k.reads), set(k.outputs)
    raise TypeError(f"unknown kernel {k!r}")


def _inplace_candidates(plan: Plan, steps: list[tuple[int, object]]) -> dict[str, str]:
    """A pointwise store may reuse a load's arena buffer read at the same positions, and
    a oneDNN convolution's result its residual's (`_sums_into_residual`), when this kernel is
    that buffer's last reader."""
    last = {b: life[1] for b, life in plan.lifetimes.items()}
    for root in roots(plan):  # its views may be read by the kernel that would reuse it
        last.pop(root, None)
    out = {}
    for step, k in steps:
        if _sums_into_residual(k, plan) and last.get(k.residual) == step:
            out[k.out] = k.residual
            continue
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


def _sums_into_residual(k, plan: Plan) -> bool:
    """A oneDNN convolution whose sum post-op may add into its residual's buffer in
    place: the residual (in the layout of the result, an arena buffer, not the source)
    is first put where the result goes, which the memory plan can then skip (ResNet's and
    ShuffleNet's residual Add). One computing in its residual's buffer already
    (`dst_in_residual`, an NCHW result) is not."""
    if not isinstance(k, kir.Conv) or not k.onednn or not k.residual or k.residual == k.x:
        return False
    if k.residual_layout != k.out_layout or k.dst_in_residual:
        return False
    return all(plan.buffers[b].kind == "arena" for b in (k.out, k.residual))


def _stored(node: Node) -> bool:
    from mdsl.ops.storage import stored_as

    return any(
        t is not None and stored_as(t.type) is not None for t in (*node.inputs, *node.outputs)
    )


def _numel(t: Tensor) -> int | Dim:
    """Elements of `t`'s buffer: its storage shape (padded in NC1HWC0, FRACTAL_NZ); an
    expression of symbols when the shape is symbolic."""
    n = 1
    for d in t.type.storage_shape:
        n *= d if isinstance(d, Dim) else int(d)
    return n


def _ops(nodes) -> str:
    return "+".join(n.op_type for n in nodes)
