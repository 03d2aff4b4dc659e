"""Lowering: each fusion group of a static-shape graph becomes Kernel IR.

A group the lowering cannot express as one kernel (an unusual broadcast inside a
reduction, a dtype the GEMM path lacks) is lowered node by node instead, and a node that
has no generated form at all becomes a `Callback` into its Python binding, so every
graph compiles and the fallbacks are visible in `exe.kernels`.
"""

from __future__ import annotations

import itertools
import math

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.codegen.access import broadcast, contiguous, contiguous_strides
from mdsl.ir.dtype import DType
from mdsl.ir.graph import CONST, Node, Tensor
from mdsl.ir.naming import ascii_word
from mdsl.ops.bindings import get_binding

HALF = (DType.float16, DType.bfloat16)


class Unsupported(Exception):
    """This group (or node) has no generated form; the caller falls back."""


def compute_dtype(dtype: DType) -> DType:
    """The type arithmetic runs in: float32 for half floats, else the dtype itself."""
    return DType.float32 if dtype in HALF else dtype


def node_ref(node: Node) -> kir.NodeRef:
    return kir.NodeRef(node.name, node.op_type, node.source)


class Context:
    """What lowering needs from the planner: buffer names, scratch, callbacks."""

    def __init__(self, buffer_of, scratch, callback, derived_constant=None):
        self.buffer_of = buffer_of  # Tensor -> buffer name
        self.scratch = scratch  # (elements, dtype) -> buffer name
        self.callback = callback  # Node -> callback index
        self.indexed = False  # whether the target renders kir.Indexed kernels
        # (numpy array, dtype) -> name of a new constant buffer; None: the target takes
        # only the graph's own constants (weights are then never repacked at plan time)
        self.derived_constant = derived_constant
        # Conv nodes that keep mdsl's kernels although oneDNN could compute them (the C
        # target's layout step found no neighbour to keep a layout with, `codegen.blocked`)
        self.hand_written: frozenset[str] = frozenset()
        self._ids = itertools.count()

    @property
    def c_target(self) -> bool:
        """Whether the plan is the C target's, whose kernels also read packed constants
        and operands in place through a Transpose (the other targets' do neither)."""
        return self.derived_constant is not None

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"


# -- expressions of nodes ----------------------------------------------------------------------
def expr_binding(op_type: str):
    """The op's scalar-expression binding (user "expr" or the library's lowering), or None."""
    return get_binding(op_type, "expr")


def node_exprs(node: Node, args: list) -> list[E.Expr]:
    """The output expressions of a pointwise `node` over argument expressions `args`."""
    binding = expr_binding(node.op_type)
    if binding is None:
        raise Unsupported(f"{node.op_type} has no expression form")
    try:
        result = binding.fn(*args, **node.attrs)
    except Exception as e:  # a user expr function failing here fails in the interpreter too
        raise Unsupported(f"expr binding of {node.op_type} raised {e}") from e
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return [E.as_expr(o) for o in outs]


def axis_inputs(node: Node) -> dict[int, int]:
    """Input index -> axis for per-axis parameters (BatchNorm's scale etc.)."""
    binding = expr_binding(node.op_type)
    if binding is None or "axis_inputs" not in binding.options:
        return {}
    from mdsl.ops.registry import get_op

    axis = binding.options.get("axis")
    if isinstance(axis, str):
        axis = node.attrs[axis]
    names = [s.name for s in get_op(node.op_type).inputs]
    return {names.index(n): axis for n in binding.options["axis_inputs"] if n in names}


class ValueTable:
    """Tensor -> expression inside one kernel; external tensors become loads."""

    def __init__(self, ctx: Context, space: tuple[int, ...]):
        self.ctx = ctx
        self.space = space
        self.loads: dict[str, kir.Access] = {}
        self.values: dict[Tensor, E.Expr] = {}

    def load(self, t: Tensor, access: kir.Access) -> E.Expr:
        name = self.ctx.fresh("ld")
        self.loads[name] = access
        return E.var(name)

    def get(self, t: Tensor, axis: int | None = None) -> E.Expr:
        if t in self.values:
            return self.values[t]
        literal = constant_literal(t)
        if literal is not None:
            return literal
        buf = self.ctx.buffer_of(t)
        shape = t.shape
        if axis is not None and len(shape) == 1 and shape[0] != 1:
            strides = tuple(1 if i == axis % len(self.space) else 0 for i in range(len(self.space)))
            access = kir.Access(buf, t.dtype, 0, strides)
        else:
            _check_broadcastable(shape, self.space)
            access = broadcast(buf, t.dtype, shape, self.space)
        value = self.load(t, access)
        if axis is None:
            self.values[t] = value
        return value

    def args_of(self, node: Node) -> list:
        per_axis = axis_inputs(node)
        return [
            None if t is None else self.get(t, per_axis.get(i)) for i, t in enumerate(node.inputs)
        ]


INLINED = (DType.float32, DType.float64, DType.int32, DType.int64)


def constant_literal(t: Tensor) -> E.Expr | None:
    """A one-element constant of a common dtype as a literal (readable, vectorizes)."""
    node = t.producer
    if node.op_type != CONST or t.dtype not in INLINED or math.prod(t.shape) != 1:
        return None
    value = node.const_value().reshape(()).item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return E.const(value)


def _check_broadcastable(shape, space):
    if len(shape) > len(space):
        raise Unsupported(f"shape {shape} does not broadcast to {space}")
    for d, s in zip(reversed(shape), reversed(space)):
        if d not in (1, s):
            raise Unsupported(f"shape {shape} does not broadcast to {space}")


# -- pointwise groups ---------------------------------------------------------------------------
def lower_pointwise(ctx: Context, nodes: list[Node], outputs: list[Tensor]) -> kir.Pointwise:
    space = tuple(outputs[0].shape)
    table = ValueTable(ctx, space)
    lets = []
    for node in nodes:
        if tuple(node.outputs[0].shape) != space:
            raise Unsupported("pointwise members of different shapes")
        for t, e in zip(node.outputs, node_exprs(node, table.args_of(node))):
            name = ctx.fresh("v")
            lets.append(kir.Let(name, e, t.dtype))
            table.values[t] = E.var(name)
    stores = [
        kir.Store(contiguous(ctx.buffer_of(t), t.dtype, space), table.values[t]) for t in outputs
    ]
    return kir.Pointwise(
        kernel_name(ctx, nodes), [node_ref(n) for n in nodes], space, table.loads, lets, stores
    )


def kernel_name(ctx: Context, nodes: list[Node]) -> str:
    ops = []
    for n in nodes:
        op = ascii_word(n.op_type, 12)
        if op not in ops:
            ops.append(op)
    return ctx.fresh("k") + "_" + "_".join(ops[:4])


# -- data movement as copies --------------------------------------------------------------------
RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")


def lower_movement(ctx: Context, node: Node) -> list[kir.Pointwise]:
    """Transpose, reshapes, Slice, Expand and Concat as affine copies."""
    op = node.op_type
    if op == "Concat":
        return [_concat_part(ctx, node, i) for i in range(len(node.inputs))]
    src, out = node.inputs[0], node.outputs[0]
    space = tuple(out.shape)
    buf = ctx.buffer_of(src)
    if op in RESHAPES or (op == "Cast" and node.attrs.get("to") == src.dtype):
        load = kir.Access(buf, src.dtype, 0, contiguous_strides(space))
    elif op == "Transpose":
        perm = node.attrs["perm"] or tuple(reversed(range(len(src.shape))))
        own = contiguous_strides(tuple(src.shape))
        load = kir.Access(buf, src.dtype, 0, tuple(own[p] for p in perm))
    elif op == "Expand":
        load = broadcast(buf, src.dtype, src.shape, space)
    elif op == "Slice":
        load = _slice_access(buf, src, node.attrs)
    else:
        raise Unsupported(f"no generated form for {op}")
    store = contiguous(ctx.buffer_of(out), out.dtype, space)
    return [_copy(ctx, node, load, store, space)]


def _copy(ctx, node, load: kir.Access, store: kir.Access, space) -> kir.Pointwise:
    return kir.Pointwise(
        kernel_name(ctx, [node]),
        [node_ref(node)],
        space,
        {"src": load},
        [],
        [kir.Store(store, E.var("src"))],
    )


def _slice_access(buf: str, src: Tensor, attrs: dict) -> kir.Access:
    shape = tuple(src.shape)
    own = contiguous_strides(shape)
    starts, ends = attrs["starts"], attrs["ends"]
    axes = attrs["axes"] or tuple(range(len(starts)))
    steps = attrs["steps"] or (1,) * len(starts)
    offset, strides = 0, list(own)
    for a, s, e, st in zip(axes, starts, ends, steps):
        a %= len(shape)
        if isinstance(shape[a], int):
            start = slice(s, e, st).indices(shape[a])[0]
        else:  # a symbolic dim: the start the shape rule (`sliced_length`) assumed
            start = shape[a] + s if s < 0 else s
        offset += start * own[a]
        strides[a] = own[a] * st
    return kir.Access(buf, src.dtype, offset, tuple(strides))


def _concat_part(ctx, node, index: int) -> kir.Pointwise:
    """The copy of input `index` of a Concat into its slot of the output."""
    out, src = node.outputs[0], node.inputs[index]
    axis = node.attrs["axis"] % len(out.shape)
    out_strides = contiguous_strides(tuple(out.shape))
    start = sum(t.shape[axis] for t in node.inputs[:index])
    store = kir.Access(ctx.buffer_of(out), out.dtype, start * out_strides[axis], out_strides)
    load = contiguous(ctx.buffer_of(src), src.dtype, tuple(src.shape))
    return _copy(ctx, node, load, store, tuple(src.shape))


# -- callbacks ------------------------------------------------------------------------------------
def lower_callback(ctx: Context, node: Node) -> kir.Callback:
    return kir.Callback(
        ctx.fresh("k") + "_py_" + ascii_word(node.op_type, 16),
        [node_ref(node)],
        ctx.callback(node),
        [None if t is None else ctx.buffer_of(t) for t in node.inputs],
        [ctx.buffer_of(t) for t in node.outputs],
    )
