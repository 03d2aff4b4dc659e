"""Data-dependent output sizes: how a node declares dims only its computation decides.

A node whose output sizes depend on its input *values* (NonZero's count, Unique's
number of values, a Reshape to a run-time shape) names those sizes in its attr
`dynamic` (the names of symbols nothing else binds), exactly as If/Case/While do. Its
`infer` uses the names as bare symbols (`value_dim`); the op registers how many names
it needs and an upper bound for each (`data_dependent`), which compiled backends size
buffers by. The builder fills `dynamic` with fresh graph-unique names when the caller
gives none. See docs/dynamic-shapes.md.

>>> from mdsl.ir.dim import Dim
>>> value_dim("nz0")
Dim('nz0')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mdsl.ir.dim import MAX_DIM, Dim, as_dim
from mdsl.ir.errors import ShapeError

DYNAMIC = "dynamic"


@dataclass(frozen=True)
class DataDependent:
    """How an op's data-dependent sizes are declared: `count(*input_types, **attrs)`
    symbols, each bounded by `bounds(*input_types, **attrs)[i]` (an int, a Dim of the
    inputs' dims, or None when nothing bounds it). `invalid` says what a size outside
    its bound means for the op (compiled code reporting one names it in the error)."""

    op_type: str
    count: Callable
    bounds: Callable
    invalid: str = ""


_DATA_DEPENDENT: dict[str, DataDependent] = {}


def data_dependent(
    op_type: str, *, count: Callable, bounds: Callable, invalid: str = ""
) -> DataDependent:
    """Declare that op `op_type` (which has a `dynamic` list[str] attr) makes `count`
    data-dependent symbols with upper `bounds`; call once after its `@op_proto`.
    `invalid`: what a size outside its bound means (a C function reports an invalid
    input, e.g. a crop beyond its dim, as such a size)."""
    entry = DataDependent(op_type, count, bounds, invalid)
    _DATA_DEPENDENT[op_type] = entry
    return entry


def data_dependent_spec(op_type: str) -> DataDependent | None:
    return _DATA_DEPENDENT.get(op_type)


def value_dim(name: str, *, lo: int = 0, hi: int | None = None) -> Dim:
    """The bare symbol `name` for an output dim a node decides at run time."""
    return Dim(name, min=lo, max=hi)


def dynamic_symbols(node) -> frozenset[str]:
    """The symbols `node` binds when it runs (control-flow or data-dependent nodes)."""
    return frozenset(node.attrs.get(DYNAMIC) or ())


def dynamic_bounds(node) -> dict[str, object]:
    """symbol -> upper bound (int, Dim or None) of a data-dependent node's symbols."""
    spec = _DATA_DEPENDENT.get(node.op_type)
    names = tuple(node.attrs.get(DYNAMIC) or ())
    if spec is None or not names:
        return {}
    types = [None if t is None else t.type for t in node.inputs]
    attrs = {k: v for k, v in node.attrs.items() if k != DYNAMIC}
    bounds = list(spec.bounds(*types, **attrs))
    return {name: (bounds[i] if i < len(bounds) else None) for i, name in enumerate(names)}


def fresh_dynamic_names(graph, op_type: str, input_types: list, attrs: dict) -> tuple[str, ...]:
    """Graph-unique symbol names for a new node of data-dependent op `op_type`."""
    spec = _DATA_DEPENDENT[op_type]
    given = {k: v for k, v in attrs.items() if k != DYNAMIC}
    count = int(spec.count(*input_types, **given))
    taken = _taken_symbols(graph)
    base = "".join(c for c in op_type if c.isalnum()).lower() or "dyn"
    names, k = [], 0
    while len(names) < count:
        name = f"{base}{k}"
        k += 1
        if name not in taken:
            names.append(name)
            taken.add(name)
    return tuple(names)


def _taken_symbols(graph) -> set[str]:
    root = graph
    while getattr(root, "parent", None) is not None:
        root = root.parent
    taken = getattr(root, "_dynamic_names", None)
    if taken is None:
        taken = set()
        for t in root.inputs.values():
            for d in t.shape:
                if isinstance(d, Dim):
                    taken |= d.free_symbols
        root._dynamic_names = taken
    return taken


def checked_size(value, where: str) -> int | Dim:
    """A size read from a tensor's value (a shape tensor, a count): a ShapeError when it
    is negative or absurd, else the int or Dim."""
    if isinstance(value, Dim):
        return value
    try:
        return as_dim(int(value), where=where)
    except ShapeError:  # as_dim's own message (a ShapeError is a ValueError too)
        raise
    except (OverflowError, ValueError, TypeError):
        raise ShapeError(f"{where}: size {value!r} is not a valid dim (0 to {MAX_DIM})") from None
