"""`@mdsl.op_proto`: declare an op's prototype; the decorated function is its InferShape.

Built-in ops are declared exactly the way users declare custom ops.
"""

from __future__ import annotations

import functools
import inspect

from mdsl.ir.errors import GraphError
from mdsl.ir.source import user_source
from mdsl.ops.apply import apply_op, prospective_name
from mdsl.ops.registry import OpDef, get_op, make_slots, register


def op_proto(
    op_type: str,
    *,
    inputs: dict,
    outputs: dict,
    attrs: dict | None = None,
    category: str = "opaque",
    doc: str | None = None,
):
    """Register op `op_type` and turn the InferShape function into the op's builder.

    The decorated function receives the inputs' `TensorType`s positionally and the attrs
    as keywords, and returns the output `TensorType` (a tuple for several outputs). Inside
    a graph the returned builder takes Tensors (or Python scalars) and attrs, and
    `name=` to name the node.

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
            )
        )
        return make_builder(opdef, infer)

    return decorate


def make_builder(opdef: OpDef, template=None):
    """A function that records an `opdef.op_type` node from Tensors and attrs.

    The definition is looked up at each call, so re-declaring an op type updates the
    builders made from earlier declarations too (a later registration wins).
    """
    op_type = opdef.op_type

    def builder(*args, name: str | None = None, **attrs):
        opdef = get_op(op_type)
        n_inputs = len(opdef.inputs)
        if len(args) > n_inputs:
            raise GraphError(
                f"takes {n_inputs} inputs, got {len(args)}",
                node=prospective_name(opdef.op_type, name),
                op_type=opdef.op_type,
                source=user_source(),
            )
        args = list(args)
        for slot in opdef.inputs[len(args) :]:  # inputs passed by keyword
            args.append(attrs.pop(slot.name, None))
        return apply_op(opdef, args, attrs, name)

    if template is not None:
        functools.update_wrapper(builder, template)
        builder.__wrapped__ = None  # keep the builder's own signature in help()
    builder.opdef = opdef
    builder.op_type = opdef.op_type
    return builder
