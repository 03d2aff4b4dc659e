"""Control-flow nodes as Kernel IR: If/Case as `kir.Branch`, While as `kir.Loop`.

Each subgraph is planned like a graph (`_PlanBuilder.lower_graph`) into a `kir.Block`,
in the same buffer table and arena as the graph around it:

- parameters get no buffers: the subgraph's Input tensors are mapped to the buffers the
  node passes (its captures' buffers; for a loop, the `current` state pointers);
- a result computed inside a block is written straight into the buffer the node expects
  it in (the node's output for If/Case, the loop's `next` state for a body); a result
  that is a parameter or a constant, or repeats another result, is copied there after
  the block's kernels (`Block.copies`);
- a loop's carried values are double-buffered: the body reads `current` and writes
  `next`, two pointers swapped after every iteration between two arena buffers, so a
  body result may be computed from any parameter without overwriting it;
- dynamic dims (`mdsl.ops.control_flow`: dims a branch or an iteration decides) are
  bound after each block from the shapes of its results (`kir.DimBinding`, checked
  against their declared range), and their buffers are sized for the largest value the
  dim can take (`plan.DynamicBound`: the largest branch's size, or a loop-carried dim's
  declared max).
"""

from __future__ import annotations

from mdsl.codegen import kir
from mdsl.codegen.lower import Unsupported, node_ref
from mdsl.ir.dim import Dim
from mdsl.ir.errors import CompileError
from mdsl.ir.graph import CONST, INPUT, Graph, Node, Tensor
from mdsl.ir.naming import ascii_word
from mdsl.ops.control_flow import (
    CASE,
    WHILE,
    ControlFlow,
    control_flow,
    subgraph_params,
    subgraph_results,
)


def lower_control_flow(builder, node: Node) -> kir.Branch | kir.Loop:
    """The kernel running control-flow `node`; Unsupported for tensors stored in another
    layout (the callback converts those)."""
    cf = control_flow(node)
    _check_origin_layouts(cf)
    if cf.kind == WHILE:
        return _lower_loop(builder, cf)
    return _lower_branch(builder, cf)


def _check_origin_layouts(cf: ControlFlow) -> None:
    from mdsl.ops.storage import stored_as

    tensors = [*cf.node.inputs, *cf.node.outputs]
    for sub in cf.subgraphs:
        tensors += [*subgraph_params(sub), *subgraph_results(sub)]
    if any(t is not None and stored_as(t.type) is not None for t in tensors):
        raise Unsupported("tensors stored in a non-origin layout")


def _kernel_name(builder, cf: ControlFlow) -> str:
    return builder.ctx.fresh("k") + "_" + ascii_word(cf.kind, 8)


# -- If and Case -----------------------------------------------------------------------------------
def _lower_branch(builder, cf: ControlFlow) -> kir.Branch:
    node = cf.node
    name = _kernel_name(builder, cf)
    selector = builder.buffer_of(cf.selector)
    captures = [builder.buffer_of(t) for t in cf.captures]
    outputs = [builder.buffer_of(t) for t in node.outputs]
    blocks, bindings = [], []
    for sub in cf.branches:
        _map_params(builder, sub, captures)
        blocks.append(_plan_block(builder, sub, outputs))
        bindings.append(_bindings(builder, cf, subgraph_results(sub), "output"))
    _register_branch_bounds(builder, cf)  # after the blocks': its candidates may use them
    failure = None
    if cf.kind == CASE:
        count = len(cf.branches)
        failure = builder.failure(
            node, f"index {{value}} is outside [0, {count - 1}] ({count} branches)"
        )
    return kir.Branch(
        name,
        [node_ref(node)],
        cf.kind,
        selector,
        cf.selector.dtype,
        blocks,
        [selector, *captures],
        outputs,
        bindings,
        failure,
    )


def _register_branch_bounds(builder, cf: ControlFlow) -> None:
    """A dynamic dim of an If/Case is at most the largest size any branch gives it (a
    branch never sees the node's own dynamic dims, so bounds of dims inside the branches
    come first: a branch's size may be one of them)."""
    from mdsl.codegen.plan import DynamicBound

    results = [subgraph_results(sub) for sub in cf.branches]
    for symbol, (dim, i, axis) in _dynamic_positions(cf).items():
        candidates = tuple(r[i].shape[axis] for r in results)
        builder.plan.bounds.append(DynamicBound(symbol, dim.min, dim.max, candidates))


# -- While -----------------------------------------------------------------------------------------
def _lower_loop(builder, cf: ControlFlow) -> kir.Loop:
    node = cf.node
    name = _kernel_name(builder, cf)
    _register_loop_bounds(builder, cf)
    body_results = subgraph_results(cf.body)
    state = []
    for t, init, result in zip(node.outputs, cf.loop_inputs, body_results):
        sizes = _largest(_numel(t), _numel(init), _numel(result))
        first = builder.new_buffer("ls", t.dtype, sizes, "arena")
        second = builder.new_buffer("ls", t.dtype, sizes, "arena")
        current = builder.new_buffer("lv", t.dtype, _numel(t), "pointer")
        following = builder.new_buffer("ln", t.dtype, _numel(result), "pointer")
        state.append(kir.LoopVar(current, following, first, second, t.dtype))
    initial = [builder.buffer_of(t) for t in cf.loop_inputs]
    captures = [builder.buffer_of(t) for t in cf.captures]
    outputs = [builder.buffer_of(t) for t in node.outputs]
    params = [v.current for v in state] + captures
    for sub in (cf.cond, cf.body):
        _map_params(builder, sub, params)
    cond = _plan_block(builder, cf.cond, [None])
    body = _plan_block(builder, cf.body, [v.next for v in state])
    limit = cf.max_iterations
    return kir.Loop(
        name,
        [node_ref(node)],
        cond,
        body,
        cond.results[0],
        state,
        [
            kir.Copy(b, v.first, v.dtype, _numel(t))
            for b, v, t in zip(initial, state, cf.loop_inputs)
        ],
        [
            kir.Copy(v.current, b, v.dtype, _numel(t))
            for b, v, t in zip(outputs, state, node.outputs)
        ],
        [*initial, *captures],
        outputs,
        _bindings(builder, cf, list(cf.loop_inputs), "initial value"),
        _bindings(builder, cf, body_results, "body result"),
        limit,
        builder.failure(node, f"the loop is still running after max_iterations={limit}"),
    )


def _register_loop_bounds(builder, cf: ControlFlow) -> None:
    """A loop-carried dynamic dim is at most its declared max (no other bound is known
    before the loop ran). Registered before the blocks are planned: the dims of buffers
    inside them, and the bounds of dims inside them, may depend on it."""
    from mdsl.codegen.plan import DynamicBound

    for symbol, (dim, i, axis) in _dynamic_positions(cf).items():
        bound = cf.bounds.get(symbol)
        if bound is not None:  # an int, or a dim of symbols bound before the run
            capacity = _rows_capacity(builder, symbol, bound)
            builder.plan.bounds.append(DynamicBound(symbol, dim.min, None, (bound,), capacity))
            continue
        if dim.max is None:
            raise CompileError(
                f"loop-carried dim {symbol} (output {i} dim {axis}) has no declared max, so "
                "compiled backends cannot size its buffers before the loop runs; declare "
                f"it as mdsl.Dim({symbol!r}, max=...) in shapes=, or run this graph with "
                "mdsl.interpret (or backend='python')",
                node=cf.node.name,
                op_type=cf.node.op_type,
                source=cf.node.source,
            )
        capacity = _rows_capacity(builder, symbol, dim.max)
        builder.plan.bounds.append(DynamicBound(symbol, dim.min, dim.max, (), capacity))


def _rows_capacity(builder, symbol: str, bound) -> str | None:
    """A capacity for loop-carried dim `symbol` when its bound may be far more than a
    loop needs (a trip count known at run time, or an int above FIRST_ROWS: an ONNX
    Loop of INT64_MAX iterations its condition ends): its buffers are planned at
    min(bound, capacity), and a loop outgrowing the capacity has the call run again with
    a larger one (`mdsl.targets.signatures.PlanShapes.growing`)."""
    from mdsl.codegen.plan import FIRST_ROWS, capacity_symbol

    if isinstance(bound, int) and bound <= FIRST_ROWS:
        return None
    capacity = capacity_symbol(symbol)
    builder.plan.capacities[capacity] = FIRST_ROWS
    return capacity


# -- blocks ----------------------------------------------------------------------------------------
def _map_params(builder, sub: Graph, buffers: list[str]) -> None:
    """The subgraph's parameters read the buffers the node passes: no copies."""
    for param, buffer in zip(subgraph_params(sub), buffers):
        builder.of_tensor[param] = buffer


def _plan_block(builder, sub: Graph, targets: list[str | None]) -> kir.Block:
    """Plan subgraph `sub`; result i ends up in `targets[i]` (None: where it is made)."""
    builder.assign_constants(sub)
    results = subgraph_results(sub)
    in_place = set()
    for i, (t, target) in enumerate(zip(results, targets)):
        if target is not None and _computed_here(t, sub) and t not in builder.of_tensor:
            builder.of_tensor[t] = target
            in_place.add(i)
    kernels = builder.lower_graph(sub)
    copies, holders = [], []
    for i, (t, target) in enumerate(zip(results, targets)):
        source = builder.buffer_of(t)
        if target is None or i in in_place:
            holders.append(source)
            continue
        copies.append(kir.Copy(source, target, t.dtype, _numel(t)))
        holders.append(target)
    return kir.Block(sub.name, kernels, copies, holders)


def _computed_here(t: Tensor, sub: Graph) -> bool:
    return t.producer.graph is sub and t.producer.op_type not in (INPUT, CONST)


# -- dynamic dims ----------------------------------------------------------------------------------
def _dynamic_positions(cf: ControlFlow) -> dict[str, tuple[Dim, int, int]]:
    """Each dynamic symbol of the node: (its declared Dim, output index, axis) where it
    first appears among the node's outputs."""
    found: dict[str, tuple[Dim, int, int]] = {}
    for i, t in enumerate(cf.node.outputs):
        for axis, d in enumerate(t.shape):
            if isinstance(d, Dim) and d.name in cf.dynamic and d.name not in found:
                found[d.name] = (d, i, axis)
    return found


def _bindings(builder, cf: ControlFlow, values: list[Tensor], what: str) -> list[kir.DimBinding]:
    """The dynamic dims of the node taken from `values` (a block's results, or a loop's
    initial values), in output order; a symbol seen again is checked for equality. A dim
    planned at a capacity is checked against it too."""
    from mdsl.codegen.plan import capacity_symbol

    out, seen = [], set()
    for i, (declared, t) in enumerate(zip(cf.node.outputs, values)):
        for axis, (d, size) in enumerate(zip(declared.shape, t.shape)):
            if not (isinstance(d, Dim) and d.name in cf.dynamic):
                continue
            top = cf.bounds.get(d.name, d.max)
            hi = "inf" if top is None else top
            where = f"{what} {i} dim {axis}"
            if d.name in seen:
                message = f"{where}: {d.name} = {{value}}, but an earlier {what} gave another size"
            else:
                message = f"{where}: {d.name} = {{value}} is outside its range [{d.min}, {hi}]"
            seen.add(d.name)
            failure = builder.failure(cf.node, message)
            capacity = capacity_symbol(d.name)
            if capacity not in builder.plan.capacities:
                out.append(kir.DimBinding(Dim(d.name), size, d.min, top, failure))
                continue
            grow = builder.failure(cf.node, f"{where}: {d.name} = {{value}}", capacity)
            out.append(kir.DimBinding(Dim(d.name), size, d.min, top, failure, Dim(capacity), grow))
    return out


def _largest(*sizes):
    """The largest of `sizes` when known now (ints, or one expression), else all of them
    (a tuple: the planner takes the largest value at run time)."""
    distinct = []
    for size in sizes:
        if not any(type(size) is type(d) and size == d for d in distinct):
            distinct.append(size)
    if all(isinstance(d, int) for d in distinct):
        return max(distinct)
    return distinct[0] if len(distinct) == 1 else tuple(distinct)


def _numel(t: Tensor):
    from mdsl.codegen.plan import _numel as numel

    return numel(t)
