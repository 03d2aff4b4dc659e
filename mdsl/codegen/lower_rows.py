"""Reduction groups as row programs.

The iteration space of a reduction group is its full shape with the kept axes moved
outside and the reduced axes inside: for each outer index, the kernel runs phases over
one row. A full-shape value is an expression evaluated per row element (recomputed in
each phase that needs it rather than stored, as Inductor does); a reduced value is a
scalar per row. Softmax is then `m = max(x); s = sum(exp(x - m)); y = exp(x - m) / s`,
the two `exp(x - m)` one expression node: the C target stores it in the output row in
the sum phase and scales it in place (`mdsl.targets.c.render._stash_row_values`).
"""

from __future__ import annotations

import math

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.codegen.access import broadcast_strides, contiguous_strides
from mdsl.codegen.kir import ROW_SIZE_VAR
from mdsl.codegen.lower import (
    Context,
    Unsupported,
    axis_inputs,
    compute_dtype,
    constant_literal,
    kernel_name,
    node_exprs,
    node_ref,
)
from mdsl.ir.dim import Dim
from mdsl.ir.graph import Node, Tensor
from mdsl.ops.registry import get_op
from mdsl.passes.fusion import node_role, reduction_space


class RowProgram:
    """Builds the phases of one row kernel."""

    def __init__(self, ctx: Context, shape: tuple[int, ...], axes: tuple[int, ...]):
        self.ctx = ctx
        self.full = tuple(shape)
        self.axes = tuple(axes)
        self.kept = tuple(i for i in range(len(shape)) if i not in axes)
        self.order = self.kept + self.axes
        self.outer_shape = tuple(shape[i] for i in self.kept)
        self.row_shape = tuple(shape[i] for i in self.axes)
        self.kept_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
        self.loads: dict[str, kir.Access] = {}
        self.vectors: dict[Tensor, E.Expr] = {}
        self.scalars: dict[Tensor, E.Expr] = {}
        self.phases: list = []

    @property
    def row_size(self) -> int:
        return math.prod(self.row_shape)

    def row_count(self, dtype):
        """The row size as a value of `dtype`: a float, or (a symbolic row) the kernel's
        `rown` variable (the row size, see `kir.Rowwise`) converted."""
        if isinstance(self.row_size, int):
            return float(self.row_size)
        return E.cast(E.var(ROW_SIZE_VAR), compute_dtype(dtype))

    # -- values -----------------------------------------------------------------------------
    def is_full(self, t: Tensor) -> bool:
        return tuple(t.shape) == self.full

    def is_reduced(self, t: Tensor) -> bool:
        dropped = self.outer_shape
        return tuple(t.shape) in (self.kept_shape, dropped) and not self.is_full(t)

    def _access(self, t: Tensor, strides_full: tuple[int, ...]) -> E.Expr:
        name = self.ctx.fresh("ld")
        strides = tuple(strides_full[i] for i in self.order)
        self.loads[name] = kir.Access(self.ctx.buffer_of(t), t.dtype, 0, strides)
        return E.var(name)

    def vector(self, t: Tensor, axis: int | None = None) -> E.Expr:
        """`t` as a per-row-element expression (a scalar broadcasts)."""
        if t in self.vectors:
            return self.vectors[t]
        literal = constant_literal(t)
        if literal is not None:
            return literal
        if t in self.scalars:
            if tuple(t.shape) != self.kept_shape and len(t.shape) == len(self.full):
                raise Unsupported("reduced value broadcast along a kept axis")
            if len(t.shape) != len(self.full) and len(self.outer_shape) and self.row_shape:
                raise Unsupported("a dropped-axes reduction result broadcast by numpy rules")
            return self.scalars[t]
        if axis is not None and len(t.shape) == 1 and t.shape[0] != 1:
            strides = tuple(1 if i == axis % len(self.full) else 0 for i in range(len(self.full)))
        else:
            _check_fits(t.shape, self.full)
            strides = broadcast_strides(tuple(t.shape), self.full)
        value = self._access(t, strides)
        if axis is None:
            self.vectors[t] = value
        return value

    def scalar(self, t: Tensor) -> E.Expr:
        """`t` (of reduced shape) as a per-row scalar."""
        if t in self.scalars:
            return self.scalars[t]
        literal = constant_literal(t)
        if literal is not None:
            return literal
        if not self.is_reduced(t) and math.prod(t.shape) != 1:
            raise Unsupported(f"{t.name} is neither a row scalar nor a constant")
        if math.prod(t.shape) == 1:
            strides = (0,) * len(self.full)
        else:  # reduced-shape tensor in memory: contiguous over the kept axes
            kept_strides = contiguous_strides(self.outer_shape)
            strides_by_axis = dict(zip(self.kept, kept_strides))
            strides = tuple(strides_by_axis.get(i, 0) for i in range(len(self.full)))
        value = self._access(t, strides)
        self.scalars[t] = value
        return value

    def let(self, value: E.Expr, dtype) -> E.Expr:
        name = self.ctx.fresh("s")
        self.phases.append(kir.Let(name, value, compute_dtype(dtype)))
        return E.var(name)

    def reduce(self, op: str, value: E.Expr, dtype) -> E.Expr:
        name = self.ctx.fresh("r")
        self.phases.append(kir.Reduce(name, op, value, compute_dtype(dtype)))
        return E.var(name)

    # -- members ------------------------------------------------------------------------------
    def add_node(self, node: Node) -> None:
        role = node_role(node)
        if role == "reduction":
            reduction = get_op(node.op_type).reduction  # the op's row rule
            if reduction is None or reduction.row is None:
                raise Unsupported(f"no row form for {node.op_type}")
            result = reduction.row(self, node)
            out = node.outputs[0]
            vector = self.is_full(out) and reduction.per_element
            (self.vectors if vector else self.scalars)[out] = result
            return
        if role != "pointwise":
            raise Unsupported(f"{node.op_type} in a reduction group")
        out = node.outputs[0]
        per_axis = axis_inputs(node)
        if self.is_full(out):
            args = [
                None if t is None else self.vector(t, per_axis.get(i))
                for i, t in enumerate(node.inputs)
            ]
            for t, e in zip(node.outputs, node_exprs(node, args)):
                self.vectors[t] = e
        else:
            args = [None if t is None else self.scalar(t) for t in node.inputs]
            for t, e in zip(node.outputs, node_exprs(node, args)):
                self.scalars[t] = self.let(e, t.dtype)

    def store(self, t: Tensor) -> None:
        buf = self.ctx.buffer_of(t)
        if t in self.vectors:
            strides = tuple(contiguous_strides(self.full)[i] for i in self.order)
            self.phases.append(kir.RowStore(kir.Access(buf, t.dtype, 0, strides), self.vectors[t]))
        else:
            kept_strides = contiguous_strides(self.outer_shape)
            strides = kept_strides + (0,) * len(self.axes)
            self.phases.append(kir.Store(kir.Access(buf, t.dtype, 0, strides), self.scalars[t]))


def _check_fits(shape, full):
    if len(shape) > len(full):
        raise Unsupported(f"{shape} does not broadcast to {full}")
    for d, f in zip(reversed(shape), reversed(full)):
        if d not in (1, f):
            raise Unsupported(f"{shape} does not broadcast to {full}")


def lower_rows(ctx: Context, nodes: list[Node], outputs: list[Tensor]) -> kir.Rowwise:
    anchors = [n for n in nodes if node_role(n) == "reduction"]
    shape, axes = reduction_space(anchors[0])
    if isinstance(axes, str) or not all(isinstance(d, int | Dim) for d in shape):
        raise Unsupported("reduction space unknown")
    if any(n.op_type == "ReduceProd" for n in anchors) and any(
        n.inputs[0].dtype.is_int for n in anchors
    ):
        raise Unsupported("integer products")
    prog = RowProgram(ctx, shape, axes)
    for node in nodes:
        prog.add_node(node)
    for t in outputs:
        prog.store(t)
    return kir.Rowwise(
        kernel_name(ctx, nodes),
        [node_ref(n) for n in nodes],
        prog.outer_shape,
        prog.row_shape,
        prog.loads,
        prog.phases,
    )
