"""Algebraic simplification: a table of local rewrites (`SIMPLIFY_RULES`).

Each row is `(pattern, fn)`: `fn(match)` returns the tensor that replaces the matched
node's output, or None. The engine (`PatternMatcher`) only accepts a replacement of the
same shape and dtype as the node it replaces, so `x + 0` is dropped only where the
result is `x` itself (not where the zero broadcasts `x` to a bigger shape or type).

Rows: neutral elements (x+0, 0+x, x-0, x*1, 1*x, x/1, x**1); Identity; Dropout
(inference); Cast to the same dtype and exact round trips (f32 -> f64 -> f32);
transpose∘transpose (perms composed, dropped when the identity); chains of reshape-like
ops (Reshape/Flatten/Squeeze/Unsqueeze) collapsed into one Reshape or dropped;
idempotent and involutive ops (Relu∘Relu, Neg∘Neg); neutral Pad, Slice, Expand, Tile,
single-input Concat; Gather of one constant index as a Slice; Where with a constant
all-true/all-false condition.
"""

from __future__ import annotations

from mdsl.ir.dtype import DType
from mdsl.ir.errors import MdslError
from mdsl.ir.graph import Graph, Tensor
from mdsl.ops.movement import resolve_reshape
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Match, Pat, PatternMatcher

x = Pat.var("x")
RESHAPE_LIKE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _same_type(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def _input(m: Match) -> Tensor | None:
    """`x` when the matched node's output has x's type (the node is a no-op on x)."""
    return m.x if _same_type(m.x, m.output) else None


# -- casts ----------------------------------------------------------------------------------
_FLOAT_BITS = {DType.float16: 11, DType.bfloat16: 8, DType.float32: 24, DType.float64: 53}
_FLOAT_EXP = {DType.float16: 5, DType.bfloat16: 8, DType.float32: 8, DType.float64: 11}
_INT_RANGE = {
    DType.bool_: (0, 1),
    DType.uint8: (0, 2**8 - 1),
    DType.int8: (-(2**7), 2**7 - 1),
    DType.int16: (-(2**15), 2**15 - 1),
    DType.int32: (-(2**31), 2**31 - 1),
    DType.int64: (-(2**63), 2**63 - 1),
    DType.uint16: (0, 2**16 - 1),
    DType.uint32: (0, 2**32 - 1),
    DType.uint64: (0, 2**64 - 1),
}


def represents_exactly(small: DType, big: DType) -> bool:
    """Whether every value of dtype `small` survives a cast to `big` and back."""
    if small == big:
        return True
    if small in _INT_RANGE and big in _INT_RANGE:
        lo, hi = _INT_RANGE[small]
        big_lo, big_hi = _INT_RANGE[big]
        return big_lo <= lo and hi <= big_hi and big != DType.bool_
    if small in _INT_RANGE and big in _FLOAT_BITS:
        lo, hi = _INT_RANGE[small]
        return max(abs(lo), hi) <= 2 ** _FLOAT_BITS[big]
    if small in _FLOAT_BITS and big in _FLOAT_BITS:
        return _FLOAT_BITS[small] <= _FLOAT_BITS[big] and _FLOAT_EXP[small] <= _FLOAT_EXP[big]
    return False


def _cast_round_trip(m: Match) -> Tensor | None:
    middle = m["mid"].dtype
    return m.x if m.x.dtype == m.output.dtype and represents_exactly(m.x.dtype, middle) else None


# -- transposes -----------------------------------------------------------------------------
def _perm(node_attrs: dict, rank: int) -> tuple[int, ...]:
    perm = node_attrs.get("perm")
    return tuple(reversed(range(rank))) if perm is None else tuple(p % rank for p in perm)


def _transpose_pair(m: Match) -> Tensor | None:
    inner, outer = m["mid"].producer, m.root
    rank = m.x.ndim
    first, second = _perm(inner.attrs, rank), _perm(outer.attrs, rank)
    composed = tuple(first[p] for p in second)
    if composed == tuple(range(rank)):
        return m.x
    return m.emit("Transpose", [m.x], {"perm": composed})


def _identity_transpose(m: Match) -> Tensor | None:
    return m.x if _perm(m.root.attrs, m.x.ndim) == tuple(range(m.x.ndim)) else None


# -- reshape chains -------------------------------------------------------------------------
def reshape_target(in_shape: tuple, out_shape: tuple) -> tuple | None:
    """A Reshape `shape` attr taking `in_shape` to `out_shape` without naming symbolic
    dims (0 copies the input's dim at that position, one -1 is inferred), or None."""
    target: list[int] = []
    for i, d in enumerate(out_shape):
        if isinstance(d, int):
            target.append(d if d != 0 else -2)  # a real 0 would mean "copy": refused below
        elif i < len(in_shape) and in_shape[i] == d:
            target.append(0)
        else:
            target.append(-1)
    if target.count(-1) > 1 or -2 in target:
        return None
    try:
        resolved = resolve_reshape(in_shape, tuple(target))
    except MdslError:
        return None
    return tuple(target) if resolved == tuple(out_shape) else None


def _reshape_chain(m: Match) -> Tensor | None:
    if _same_type(m.x, m.output):
        return m.x
    target = reshape_target(m.x.shape, m.output.shape)
    if target is None:
        return None
    return m.emit("Reshape", [m.x], {"shape": target})


# -- neutral data movement ------------------------------------------------------------------
def _neutral_pad(m: Match) -> Tensor | None:
    return _input(m) if all(p == 0 for p in m.root.attrs["pads"]) else None


def _neutral_slice(m: Match) -> Tensor | None:
    steps = m.root.attrs.get("steps")
    if steps is not None and any(s != 1 for s in steps):
        return None
    return _input(m)  # a unit-step range as long as the dim is the whole dim


def _neutral_tile(m: Match) -> Tensor | None:
    return _input(m) if all(r == 1 for r in m.root.attrs["repeats"]) else None


def _gather_one(m: Match) -> Tensor | None:
    """Gather of one constant in-range index (a scalar or a one-element vector) as a
    Slice of that index, squeezed for a scalar: data movement that fuses with the
    transposes and reshapes around it into one copy, where a Gather kernel copied on
    its own (the Q, K and V picked out of a fused projection)."""
    index = m["index"].producer.const_value()
    axis = m.root.attrs["axis"] % m.x.ndim
    size = m.x.shape[axis]
    if index.size != 1 or index.ndim > 1 or not isinstance(size, int):
        return None
    i = int(index.reshape(()))
    if not -size <= i < size:
        return None  # out of range: the Gather kernel reports it at run time
    i %= size
    picked = m.emit("Slice", [m.x], {"starts": (i,), "ends": (i + 1,), "axes": (axis,)})
    return picked if index.ndim == 1 else m.emit("Squeeze", [picked], {"axes": (axis,)})


def _constant_where(m: Match) -> Tensor | None:
    cond = m["cond"].producer.const_value()
    if cond.size == 0:
        return None
    picked = m.a if cond.all() else m.b if not cond.any() else None
    return picked if picked is not None and _same_type(picked, m.output) else None


SIMPLIFY_RULES = PatternMatcher(
    [
        # neutral elements
        (Pat("Add", x, Pat.const(0)), _input),
        (Pat("Sub", x, Pat.const(0)), _input),
        (Pat("Mul", x, Pat.const(1)), _input),
        (Pat("Div", x, Pat.const(1)), _input),
        (Pat("Pow", x, Pat.const(1)), _input),
        # no-ops
        (Pat("Identity", x), _input),
        (Pat("Dropout", x), _input),
        (Pat("Cast", x), lambda m: _input(m) if m.root.attrs["to"] == m.x.dtype else None),
        (Pat("Cast", Pat("Cast", x, name="mid")), _cast_round_trip),
        # transposes
        (Pat("Transpose", Pat("Transpose", x, name="mid")), _transpose_pair),
        (Pat("Transpose", x), _identity_transpose),
        # reshape-like chains, and reshapes to the same shape
        (Pat(RESHAPE_LIKE, Pat(RESHAPE_LIKE, x)), _reshape_chain),
        (Pat(RESHAPE_LIKE, x), _input),
        # idempotent and involutive ops
        (Pat("Relu", Pat("Relu", x, name="inner")), lambda m: m["inner"]),
        (Pat("Abs", Pat("Abs", x, name="inner")), lambda m: m["inner"]),
        (Pat("Neg", Pat("Neg", x)), _input),
        # neutral data movement
        (Pat("Pad", x), _neutral_pad),
        (Pat("Slice", x), _neutral_slice),
        (Pat("Expand", x), _input),
        (Pat("Tile", x), _neutral_tile),
        (Pat("Concat", x), _input),
        (Pat("Gather", x, Pat.cvar("index")), _gather_one),
        (Pat("Where", Pat.cvar("cond"), Pat.var("a"), Pat.var("b")), _constant_where),
    ]
)


@register("simplify", levels=(1, 2, 3), phase="cleanup")
def simplify(g: Graph) -> PassResult:
    """Apply the algebraic simplification table (in subgraphs too).

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (2, 3))
    ...     g.output((x.T.T * 1.0).reshape(6).reshape(3, 2), "y")
    >>> [(n.op_type, n.attrs.get("shape")) for n in mdsl.passes.run(g, ["simplify"]).nodes]
    [('Input', None), ('Reshape', (3, 2)), ('Output', None)]
    """
    count = SIMPLIFY_RULES.sweep(g)
    return PassResult(g, count > 0, f"simplified {count} node(s)")


__all__ = ["RESHAPE_LIKE", "SIMPLIFY_RULES", "represents_exactly", "reshape_target", "simplify"]
