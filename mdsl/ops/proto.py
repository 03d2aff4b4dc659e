"""`@mdsl.op_proto`: declare an op's prototype; the decorated function is its InferShape.

Built-in ops are declared exactly the way users declare custom ops.
"""

from __future__ import annotations

import functools
import inspect

from mdsl.ir.errors import GraphError
from mdsl.ir.source import user_source
from mdsl.ir.tracebacks import api_boundary
from mdsl.ops.apply import apply_op, prospective_name
from mdsl.ops.reductions import Reduction
from mdsl.ops.registry import COST_CLASSES, Attr, OpDef, get_op, make_slots, register
from mdsl.ops.signature import bind_call, builder_doc, builder_signature


def op_proto(
    op_type: str,
    *,
    inputs: dict,
    outputs: dict,
    attrs: dict | None = None,
    category: str = "opaque",
    doc: str | None = None,
    cost: str = "arithmetic",
    reduction: Reduction | None = None,
):
    """Register op `op_type` and turn the InferShape function into the op's builder.

    The decorated function receives the inputs' `TensorType`s positionally and the attrs
    as keywords, and returns the output `TensorType` (a tuple for several outputs). Inside
    a graph the returned builder takes Tensors (or Python scalars) and attrs, and
    `name=` to name the node. `reduction`: what a "reduction" op reduces and how a row
    kernel computes it (`mdsl.ops.reductions.Reduction`; by default its `axes`/`axis` attr
    and no row form).

    >>> import mdsl
    >>> @mdsl.op_proto("Double", inputs={"x": "float"}, outputs={"y": "float"})
    ... def double(x):
    ...     return x
    >>> with mdsl.Graph() as g:
    ...     y = double(g.input("x", (3,)))
    ...     g.output(y, "y")
    >>> y.producer.op_type, y.shape
    ('Double', (3,))
    """
    if not isinstance(op_type, str) or not op_type.isidentifier():
        raise GraphError(f"op type must be an identifier, got {op_type!r}")
    for name, spec in (attrs or {}).items():
        if not isinstance(spec, Attr):
            raise GraphError(
                f"op {op_type}: attr {name!r} must be declared as mdsl.Attr(kind, default=...), "
                f"got {type(spec).__name__}"
            )
    if cost not in COST_CLASSES:
        raise GraphError(f"op {op_type}: cost= is one of {', '.join(COST_CLASSES)}, got {cost!r}")

    def decorate(infer):
        opdef = register(
            OpDef(
                op_type,
                make_slots(inputs),
                make_slots(outputs),
                dict(attrs or {}),
                infer,
                category,
                doc or inspect.getdoc(infer) or "",
                cost=cost,
                reduction=reduction,
            )
        )
        return make_builder(opdef, infer)

    return decorate


def make_builder(opdef: OpDef, template=None):
    """A function that records an `opdef.op_type` node from Tensors and attrs.

    Its signature and docstring come from the definition (`mdsl.ops.signature`). The
    definition is looked up at each call, so re-declaring an op type updates the
    builders made from earlier declarations too (a later registration wins).
    """
    op_type = opdef.op_type

    @api_boundary
    def builder(*args, name: str | None = None, **kwargs):
        opdef = get_op(op_type)
        try:
            inputs, attrs = bind_call(opdef, args, kwargs)
        except GraphError as e:
            where = prospective_name(op_type, name)
            raise e.with_context(node=where, op_type=op_type, source=user_source()) from None
        return apply_op(opdef, inputs, attrs, name)

    if template is not None:
        functools.update_wrapper(builder, template)
    facts = vars(builder)  # a function's attributes, set without upsetting type checkers
    facts.pop("__wrapped__", None)  # help() and inspect show the signature below, not infer's
    facts.update(__signature__=builder_signature(opdef), opdef=opdef, op_type=opdef.op_type)
    builder.__doc__ = builder_doc(opdef)
    return builder
