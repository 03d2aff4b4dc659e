"""What an op builder shows and accepts, derived from its `OpDef`.

Every builder made from an op definition (built-in or `@mdsl.op_proto`) gets a real
`inspect.Signature` (inputs by name, then keyword-only attrs with their types and
defaults, then `name=`) and a docstring listing its inputs with their dtypes, its attrs
and its outputs. Calls are bound the same way, and misuse becomes a `GraphError` with a
suggestion ("did you mean `strides=`?", "pass the shape as `shape=`").

>>> import inspect, mdsl
>>> print(inspect.signature(mdsl.ops.softmax))
(x: mdsl.Tensor, *, axis: int = -1, name: str | None = None, device: str | None = None) -> mdsl.Tensor
"""

from __future__ import annotations

import inspect
from typing import Literal

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError, did_you_mean
from mdsl.ir.graph import Tensor
from mdsl.ops.registry import Attr, OpDef, Slot

_P = inspect.Parameter
_ATTR_ANNOTATIONS = {
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "dtype": DType | str,
    "tensor": np.ndarray,
    "list[int]": list[int] | tuple[int, ...] | int,
    "list[float]": list[float] | tuple[float, ...],
    "list[str]": list[str] | tuple[str, ...],
}


def builder_signature(opdef: OpDef) -> inspect.Signature:
    """`(inputs..., *, attrs..., name=None)` with annotations, for `opdef`'s builder."""
    params = []
    defaulted = False  # after an optional input, Python needs defaults on the rest too
    for slot in opdef.inputs:
        defaulted = defaulted or slot.optional
        default = None if defaulted else _P.empty
        params.append(
            _P(
                slot.name,
                _P.POSITIONAL_OR_KEYWORD,
                default=default,
                annotation=_input_annotation(slot),
            )
        )
    for attr_name, attr in opdef.attrs.items():
        default = _P.empty if attr.required else attr.default
        params.append(
            _P(attr_name, _P.KEYWORD_ONLY, default=default, annotation=_attr_annotation(attr))
        )
    params.append(_P("name", _P.KEYWORD_ONLY, default=None, annotation=str | None))
    many = len(opdef.outputs) > 1 or (opdef.outputs and opdef.outputs[-1].variadic)
    return inspect.Signature(params, return_annotation=tuple[Tensor, ...] if many else Tensor)


def _input_annotation(slot: Slot):
    if slot.variadic:
        return list[Tensor]
    return Tensor | None if slot.optional else Tensor  # Python scalars are accepted too


def _attr_annotation(attr: Attr):
    base = _ATTR_ANNOTATIONS[attr.kind]
    if attr.choices is not None:
        base = Literal[attr.choices]
    return base | None if attr.default is None else base


def builder_doc(opdef: OpDef) -> str:
    """The op's own doc followed by its inputs (with dtypes), attrs and outputs."""
    lines = [opdef.doc.rstrip() or f"The {opdef.op_type} op.", ""]
    lines.append(f"Records one `{opdef.op_type}` node ({opdef.category}).")
    lines += ["", "Inputs:"]
    lines += [f"    {s.name}: {_slot_text(s)}" for s in opdef.inputs] or ["    none"]
    if opdef.attrs:
        lines += ["", "Attrs (keyword-only):"]
        lines += [f"    {n}: {_attr_text(a)}" for n, a in opdef.attrs.items()]
    lines += ["", "Outputs:"]
    lines += [f"    {s.name}: {_slot_text(s)}" for s in opdef.outputs]
    return "\n".join(lines) + "\n"


def _slot_text(slot: Slot) -> str:
    dtypes = ", ".join(sorted(d.value for d in slot.allowed))
    kind = "list of tensors" if slot.variadic else "tensor"
    optional = ", optional" if slot.optional else ""
    return f"{kind}{optional} of {dtypes}"


def _attr_text(attr: Attr) -> str:
    text = attr.kind
    if attr.choices is not None:
        text += " (one of " + ", ".join(repr(c) for c in attr.choices) + ")"
    text += ", required" if attr.required else f", default {attr.default!r}"
    return text + (f": {attr.doc}" if attr.doc else "")


def bind_call(opdef: OpDef, args: tuple, kwargs: dict) -> tuple[list, dict]:
    """Split a builder call into the node's inputs and attrs; GraphError on misuse."""
    slots = opdef.inputs
    if len(args) > len(slots):
        raise GraphError(_too_many_positional(opdef, len(args)))
    inputs = list(args)
    for slot in slots[len(args) :]:
        inputs.append(kwargs.pop(slot.name, None))
    for slot in slots[: len(args)]:
        if slot.name in kwargs:
            raise GraphError(f"input {slot.name!r} given both by position and as {slot.name}=")
    return inputs, kwargs  # unknown attrs: `OpDef.check_attrs` says which, with a suggestion


def _too_many_positional(opdef: OpDef, given: int) -> str:
    names = ", ".join(s.name for s in opdef.inputs) or "none"
    n = len(opdef.inputs)
    message = f"takes {n} input{'s' if n != 1 else ''} ({names}), got {given} positional arguments"
    extra = list(opdef.attrs)[: given - n]
    if extra:
        message += "; attrs are keyword-only: pass " + " and ".join(
            f"the {a} as `{a}=`" for a in extra
        )
    return message


def unknown_keyword_message(keyword: str, inputs: list[str], attrs: list[str]) -> str:
    """`unknown keyword `stride=` (did you mean `strides=`?); inputs: ...; attrs: ...`."""
    message = f"unknown keyword `{keyword}=`"
    message += did_you_mean(keyword, [*inputs, *attrs, "name", "device"])
    parts = [
        f"inputs: {', '.join(inputs)}" if inputs else "",
        f"attrs: {', '.join(attrs)}" if attrs else "",
    ]
    known = "; ".join(k for k in parts if k)
    return f"{message}; {known}" if known else message


def misuse_message(builder, args: tuple, kwargs: dict) -> str | None:
    """Why a call of a hand-written builder does not fit its signature (None: it fits)."""
    sig = inspect.signature(builder)
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        params = sig.parameters.values()
        positional = [
            p.name for p in params if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
        ]
        keyword_only = [p.name for p in params if p.kind == _P.KEYWORD_ONLY]
        unknown = [k for k in kwargs if k not in sig.parameters]
        if unknown and not any(p.kind == _P.VAR_KEYWORD for p in params):
            return unknown_keyword_message(
                unknown[0], positional, [k for k in keyword_only if k not in ("name", "device")]
            )
        if "positional" in str(e) and keyword_only:
            extra = [k for k in keyword_only if k not in ("name", "device")]
            hint = f"; pass the {extra[0]} as `{extra[0]}=`" if extra else ""
            return f"takes {len(positional)} positional arguments ({', '.join(positional)}), got {len(args)}{hint}"
        return str(e).replace(f"{builder.__name__}() ", "")
    return None
