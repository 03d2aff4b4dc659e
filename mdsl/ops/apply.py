"""Recording one op in the graph being built: check, infer, name, append.

Every op builder (built-in or user `@mdsl.op_proto`) ends here, so every node gets the same
checks and its errors name the node path, the op type and the user's source line.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir import context
from mdsl.ir.dtype import DType
from mdsl.ir.errors import DTypeError, GraphError, MdslError
from mdsl.ir.graph import Graph, Tensor
from mdsl.ir.source import user_source
from mdsl.ops.dynamic import DYNAMIC, data_dependent_spec, fresh_dynamic_names
from mdsl.ops.registry import OpDef, Slot

_SCALARS = (bool, int, float, np.number, np.bool_)


def building_graph(what: str) -> Graph:
    """The graph being built, or a GraphError saying `what` needs one."""
    g = context.current_graph()
    if g is None:
        raise GraphError(
            f"{what} used outside a graph; build inside `with mdsl.Graph(...) as g:`",
            source=user_source(),
        )
    return g


def apply_op(opdef: OpDef, inputs: list, attrs: dict, name: str | None = None):
    """Record a node of `opdef` over `inputs` (Tensors, None, Python scalars, lists for a
    variadic slot) and return its output Tensor (a tuple for several outputs)."""
    g = building_graph(f"op {opdef.op_type}")
    source = user_source()
    if name is not None and not isinstance(name, str):
        raise GraphError(
            f"name= must be a string, got {name!r}", op_type=opdef.op_type, source=source
        )
    where = prospective_name(opdef.op_type, name)
    try:
        flat = _bind_inputs(g, opdef, inputs)
        checked_attrs = opdef.check_attrs(_with_dynamic_names(g, opdef, flat, attrs))
        types = opdef.infer_types([None if t is None else t.type for t in flat], checked_attrs)
    except MdslError as e:
        raise e.with_context(node=where, op_type=opdef.op_type, source=source) from None
    node = g._new_node(opdef.op_type, flat, checked_attrs, name=name, types=types, source=source)
    outs = node.outputs
    return outs[0] if len(outs) == 1 and not opdef.outputs[-1].variadic else tuple(outs)


def _with_dynamic_names(g: Graph, opdef: OpDef, flat: list, attrs: dict) -> dict:
    """`attrs`, with fresh names for a data-dependent op's run-time symbols when the
    caller gave none (docs/dynamic-shapes.md)."""
    if data_dependent_spec(opdef.op_type) is None or attrs.get(DYNAMIC):
        return attrs
    types = [None if t is None else t.type for t in flat]
    return {**attrs, DYNAMIC: fresh_dynamic_names(g, opdef.op_type, types, attrs)}


def prospective_name(op_type: str, name: str | None) -> str:
    """The name a node of `op_type` would get in the current scope (before uniquing)."""
    scope = context.current_scope()
    leaf = name or op_type
    return f"{scope}/{leaf}" if scope else leaf


def _bind_inputs(g: Graph, opdef: OpDef, inputs: list) -> list[Tensor | None]:
    """Match call arguments to input slots; scalars become constants; check dtypes."""
    slots = opdef.inputs
    if len(inputs) > len(slots):
        raise GraphError(f"takes {len(slots)} inputs, got {len(inputs)}")
    inputs = list(inputs) + [None] * (len(slots) - len(inputs))
    scalar_dtype = _first_tensor_dtype(inputs)
    flat: list[Tensor | None] = []
    for slot, value in zip(slots, inputs):
        if slot.variadic:
            if not isinstance(value, (list, tuple)) or not value:
                raise GraphError(f"input {slot.name!r} takes a non-empty list of tensors")
            flat.extend(_as_input(g, slot, v, scalar_dtype) for v in value)
        elif value is None:
            if not slot.optional:
                raise GraphError(f"missing required input {slot.name!r}")
            flat.append(None)
        else:
            flat.append(_as_input(g, slot, value, scalar_dtype))
    return flat


def _first_tensor_dtype(inputs) -> DType | None:
    """The dtype Python scalars take: the first non-bool tensor operand's (so the 0.0 in
    `where(cond, x, 0.0)` follows x, not cond), else the first tensor's."""
    dtypes = [v.dtype for v in _tensors_in(inputs)]
    return next((d for d in dtypes if d != DType.bool_), dtypes[0] if dtypes else None)


def _tensors_in(inputs):
    for v in inputs:
        if isinstance(v, Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (w for w in v if isinstance(w, Tensor))


def _as_input(g: Graph, slot: Slot, value, scalar_dtype: DType | None) -> Tensor:
    if isinstance(value, _SCALARS) or (isinstance(value, np.ndarray) and value.ndim == 0):
        value = scalar_const(g, value, scalar_dtype, slot)
    elif isinstance(value, np.ndarray):
        value = g.const("Const", value)
    if not isinstance(value, Tensor):
        raise GraphError(f"input {slot.name!r} must be a Tensor, got {type(value).__name__}")
    g.check_owns(value, f"input {slot.name!r}")
    if value.dtype not in slot.allowed:
        allowed = ", ".join(sorted(d.value for d in slot.allowed))
        raise DTypeError(f"input {slot.name!r} is {value.dtype}, expected one of {allowed}")
    return value


def scalar_const(g: Graph, value, dtype: DType | None, slot: Slot | None = None) -> Tensor:
    """A Python scalar as a 0-d constant of `dtype` (the other operand's dtype)."""
    if dtype is None:
        dtype = _default_scalar_dtype(value)
    if slot is not None and dtype not in slot.allowed:
        dtype = _default_scalar_dtype(value)
    lossy = isinstance(value, float) and not float(value).is_integer()
    if lossy and not dtype.is_float and dtype != DType.bool_:
        raise DTypeError(f"scalar {value} cannot become a {dtype} constant without rounding")
    return g.const("Const", np.array(value, dtype=dtype.np))


def _default_scalar_dtype(value) -> DType:
    if isinstance(value, (bool, np.bool_)):
        return DType.bool_
    if isinstance(value, np.number):
        return DType.of(value.dtype)
    return DType.int64 if isinstance(value, int) else DType.float32
