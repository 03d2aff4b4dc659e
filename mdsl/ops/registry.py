"""The op registry: one `OpDef` per op type holding its prototype and rules.

An OpDef says what an op accepts (inputs with allowed dtypes, attrs with types and
defaults), how its output types follow (`infer`, run when a node is built) and what kind of
op it is for the codegen (`category`). Implementations live elsewhere, in the binding
table (`mdsl.ops.bindings`): the graph never names an implementation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mdsl.ir import dtype as dtypes
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import DTypeError, GraphError, MdslError, ShapeError, did_you_mean
from mdsl.ops.reductions import Reduction

CATEGORIES = ("pointwise", "reduction", "extern", "data_movement", "opaque", "structural")

_DTYPE_GROUPS = {
    "any": dtypes.ALL,
    "float": dtypes.FLOATS,
    "int": dtypes.INTS,
    "numeric": dtypes.NUMERIC,
    "bool": frozenset({DType.bool_}),
}


def parse_dtype_set(spec) -> frozenset[DType]:
    """`["float16", "int8"]`, `"float"` (a group name) or a mix: the allowed dtypes."""
    if isinstance(spec, (str, DType)):
        spec = [spec]
    allowed: set[DType] = set()
    for item in spec:
        if isinstance(item, str) and item in _DTYPE_GROUPS:
            allowed |= _DTYPE_GROUPS[item]
        else:
            allowed.add(DType.of(item))
    return frozenset(allowed)


@dataclass(frozen=True, slots=True)
class In:
    """An input slot: allowed dtypes; `optional` may be None; `variadic` takes a list."""

    dtypes: object = "any"
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True, slots=True)
class Slot:
    name: str
    allowed: frozenset[DType]
    optional: bool = False
    variadic: bool = False


_REQUIRED = object()
_ATTR_TYPES = {int: "int", float: "float", bool: "bool", str: "str", DType: "dtype"}


class Attr:
    """A typed attribute of an op: `Attr(int)`, `Attr([int], default=(1, 1))`,
    `Attr(str, default="none", choices=("none", "tanh"))`, `Attr(float, required=True)`.

    Types: int, float, bool, str, mdsl.DType, np.ndarray, and lists `[int]`, `[float]`,
    `[str]` (stored as tuples). Integer and float attrs also hold symbolic dims (`Dim`).
    """

    __slots__ = ("choices", "default", "doc", "kind")

    def __init__(self, type, default=_REQUIRED, *, required=None, choices=None, doc=""):
        self.kind = _attr_kind(type)
        if required:
            default = _REQUIRED
        self.default = default
        self.choices = tuple(choices) if choices is not None else None
        self.doc = doc

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def __repr__(self):
        d = "" if self.required else f", default={self.default!r}"
        return f"Attr({self.kind}{d})"

    def coerce(self, name: str, value):
        """Validate `value` and return its normalized form; raise GraphError otherwise."""
        if value is None and not self.required and self.default is None:
            return None
        try:
            out = _COERCE[self.kind](value)
        except MdslError as e:  # e.g. an unknown dtype name: say which attr held it
            raise type(e)(f"attr {name!r}: {e.message}") from None
        except (TypeError, ValueError):
            raise GraphError(f"attr {name!r} expects {self.kind}, got {_shown(value)}") from None
        if self.choices is not None and out not in self.choices:
            raise GraphError(f"attr {name!r} must be one of {self.choices}, got {value!r}")
        return out


def _attr_kind(t) -> str:
    if isinstance(t, list) and len(t) == 1 and t[0] in (int, float, str):
        return f"list[{_ATTR_TYPES[t[0]]}]"
    if t is np.ndarray:
        return "tensor"
    if isinstance(t, type) and t in _ATTR_TYPES:
        return _ATTR_TYPES[t]
    raise GraphError(f"unsupported attr type {t!r}")


def _shown(value) -> str:
    """A short repr (repr of an int of over 4300 digits raises)."""
    if isinstance(value, int) and abs(value) >= 1 << 63:
        return f"an int of {value.bit_length()} bits (beyond int64)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_intlike(v) -> bool:
    return isinstance(v, (int, np.integer, Dim)) and not isinstance(v, (bool, np.bool_))


def _as_int(v):
    if not _is_intlike(v):
        raise TypeError
    if isinstance(v, Dim):
        return v
    if not -(1 << 63) <= int(v) < 1 << 63:  # generated code holds int attrs as int64
        raise ValueError
    return int(v)


def _as_float(v):
    if isinstance(v, Dim):  # a count known at run time (Range's limit S)
        return v
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        raise TypeError
    try:
        return float(v)
    except OverflowError:  # an int beyond any double
        raise ValueError from None


def _as_bool(v):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError
    return bool(v)


def _as_str(v):
    if not isinstance(v, str):
        raise TypeError
    return v


def _as_list(item):
    def coerce(v):
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise TypeError
        return tuple(item(x) for x in v)

    return coerce


def _as_tensor(v):
    if not isinstance(v, np.ndarray):
        raise TypeError
    return v


_COERCE = {
    "int": _as_int,
    "float": _as_float,
    "bool": _as_bool,
    "str": _as_str,
    "dtype": DType.of,
    "tensor": _as_tensor,
    "list[int]": _as_list(_as_int),
    "list[float]": _as_list(_as_float),
    "list[str]": _as_list(_as_str),
}


COST_CLASSES = ("arithmetic", "transcendental")  # what one output element costs, roughly
# ONNX's random ops: a new value every run, so never folded, hoisted or evaluated at import
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli"}
)


@dataclass(slots=True)
class OpDef:
    """Everything mdsl knows about an op type, apart from its implementations."""

    op_type: str
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    attrs: dict[str, Attr]
    infer: Callable
    category: str = "opaque"
    doc: str = ""
    extra: dict = field(default_factory=dict)  # lowering hints added by later stages
    cost: str = "arithmetic"  # or "transcendental": an exp-like op (passes.cost weighs it)
    reduction: Reduction | None = None  # a reduction's axes and row rule (ops.reductions)

    def reduced_axes(self, attrs: dict, rank: int) -> tuple[int, ...]:
        """The sorted axes a node of this reduction op reduces, for an input of `rank`
        (TypeError when the op declares none and has no `axes`/`axis` attr)."""
        return (self.reduction or Reduction()).axes(attrs, rank)

    def check_attrs(self, given: dict) -> dict:
        """Attrs with defaults filled in, each validated; GraphError on unknown/missing."""
        unknown = set(given) - set(self.attrs)
        if unknown:
            known = ", ".join(self.attrs) or "none"
            first = sorted(unknown)[0]
            raise GraphError(
                f"unknown attr {', '.join(sorted(unknown))} (known: {known})"
                + did_you_mean(first, self.attrs)
            )
        out = {}
        for name, spec in self.attrs.items():
            if name in given:
                out[name] = spec.coerce(name, given[name])
            elif spec.required:
                raise GraphError(f"missing required attr {name!r}")
            else:
                out[name] = spec.default
        return out

    def infer_types(self, input_types: list, attrs: dict) -> list:
        """Run the InferShape rule; always returns a list of TensorTypes."""
        from mdsl.ir.tensor_type import TensorType

        try:
            result = self.infer(*input_types, **attrs)
        except MdslError:
            raise
        except Exception as e:
            raise GraphError(
                f"InferShape of {self.op_type!r} raised {type(e).__name__}: {e}"
            ) from e
        types = list(result) if isinstance(result, (tuple, list)) else [result]
        for t in types:
            if not isinstance(t, TensorType):
                raise GraphError(
                    f"InferShape of {self.op_type!r} must return TensorType(s), got {t!r:.60}"
                )
        self._check_output_types(types)
        return types

    def _check_output_types(self, types: list) -> None:
        variadic = bool(self.outputs) and self.outputs[-1].variadic
        if not variadic and len(types) != len(self.outputs):
            raise GraphError(
                f"InferShape of {self.op_type!r} returned {len(types)} types "
                f"for {len(self.outputs)} outputs"
            )
        for i, t in enumerate(types):
            slot = self.outputs[min(i, len(self.outputs) - 1)]
            if t.dtype not in slot.allowed:
                raise DTypeError(
                    f"output {slot.name!r} would be {t.dtype}, not one of {_names(slot.allowed)}"
                )


def _names(allowed) -> str:
    return ", ".join(sorted(d.value for d in allowed))


_REGISTRY: dict[str, OpDef] = {}
_LOCK = threading.Lock()


def register(opdef: OpDef) -> OpDef:
    """Add or replace an op definition (a later registration of a type wins)."""
    if opdef.category not in CATEGORIES:
        raise GraphError(f"op {opdef.op_type!r}: unknown category {opdef.category!r}")
    with _LOCK:
        _REGISTRY[opdef.op_type] = opdef
    return opdef


def get_op(op_type: str) -> OpDef:
    try:
        return _REGISTRY[op_type]
    except KeyError:
        raise GraphError(f"unknown op type {op_type!r}; register it with @mdsl.op_proto") from None


def has_op(op_type: str) -> bool:
    return op_type in _REGISTRY


def all_ops() -> dict[str, OpDef]:
    with _LOCK:
        return dict(_REGISTRY)


def make_slots(spec: dict) -> tuple[Slot, ...]:
    slots = []
    for name, s in spec.items():
        s = s if isinstance(s, In) else In(s)
        slots.append(Slot(name, parse_dtype_set(s.dtypes), s.optional, s.variadic))
    return tuple(slots)


def check(condition, message: str, error: type[MdslError] = ShapeError) -> None:
    """Inside an InferShape: raise `error` (ShapeError by default) unless `condition`.

    The builder adds the node path, op type and the user's source line to the message.
    """
    if not condition:
        raise error(message)


def infer_node_types(node) -> list:
    """Re-infer a built node's output types (the verifier's type rule).

    Attrs are validated first: a node read from a file or edited by hand may hold any.
    An op whose types follow from its subgraphs (If, While) gives a node-level rule as
    `extra["infer_node"](node, attrs)`.
    """
    opdef = get_op(node.op_type)
    attrs = opdef.check_attrs(node.attrs)
    infer_node = opdef.extra.get("infer_node")
    if infer_node is not None:
        return infer_node(node, attrs)
    return opdef.infer_types([None if t is None else t.type for t in node.inputs], attrs)


def _install_type_rule() -> None:
    from mdsl.ir.verify import set_type_rule

    set_type_rule(infer_node_types)


_install_type_rule()
