"""Shape rules shared by many ops (broadcasting, axes), symbolic dims included."""

from __future__ import annotations

import math

from mdsl.ir.dim import Dim
from mdsl.ir.errors import ShapeError


def broadcast_shapes(*shapes: tuple) -> tuple:
    """numpy broadcasting over dims that may be symbolic.

    A dim of 1 stretches; equal dims agree; a symbolic dim against a size k > 1 gives k
    (the runtime checks the symbol is k or 1); two different symbols are refused, since
    nothing at build time says which one wins.

    >>> broadcast_shapes((3, 1, 5), (4, 1))
    (3, 4, 5)
    >>> broadcast_shapes(("N", 1), (1, 8)) == (Dim("N"), 8)
    True
    """
    shapes = [tuple(Dim(d) if isinstance(d, str) else d for d in s) for s in shapes]
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-rank, 0):
        dim = 1
        for s in shapes:
            if len(s) >= -i:
                dim = _broadcast_dim(dim, s[i], shapes)
        out.append(dim)
    return tuple(out)


def _broadcast_dim(a, b, shapes):
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if a == b:
        return a
    if isinstance(a, Dim) and isinstance(b, int):
        return b
    if isinstance(b, Dim) and isinstance(a, int):
        return a
    shown = " and ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes)
    raise ShapeError(f"shapes {shown} cannot broadcast: {a} vs {b}")


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [-rank, rank) as a non-negative index."""
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes, rank: int, what: str = "axes") -> tuple[int, ...]:
    out = tuple(normalize_axis(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"{what} {tuple(axes)} repeat an axis")
    return out


def numel(shape) -> int | Dim:
    return math.prod(shape, start=1)


def divide_exactly(total, part, what: str):
    """total / part where part divides total (ints or symbolic monomials)."""
    if isinstance(total, int) and isinstance(part, int):
        if part == 0 or total % part:
            raise ShapeError(f"{what}: {total} is not divisible by {part}")
        return total // part
    if isinstance(part, int):
        result = total // part
        if isinstance(result, Dim) and "//" in str(result):
            raise ShapeError(f"{what}: {total} is not divisible by {part}")
        return result
    return _divide_symbolic(total, part, what)


def _divide_symbolic(total, part: Dim, what: str):
    if len(part.terms) != 1:
        raise ShapeError(f"{what}: cannot divide {total} by {part}")
    ((pmono, pcoef),) = part.terms.items()
    if isinstance(total, int):
        raise ShapeError(f"{what}: cannot divide {total} by {part}")
    terms = {}
    for mono, coef in total.terms.items():
        rest = list(mono)
        for atom in pmono:
            if atom not in rest:
                raise ShapeError(f"{what}: {total} is not divisible by {part}")
            rest.remove(atom)
        if coef % pcoef:
            raise ShapeError(f"{what}: {total} is not divisible by {part}")
        terms[tuple(rest)] = coef // pcoef
    return Dim._from_terms(terms)


def unify_dims(a, b, what: str):
    """The one dim that `a` and `b` must both be (for ops that need equal dims).

    Equal dims agree; a symbolic dim against a static k gives k (the runtime checks the
    symbol is k), as in `broadcast_shapes`; anything else is a ShapeError naming `what`.

    >>> unify_dims(Dim("N"), Dim("N"), "dim 0"), unify_dims(Dim("N"), 4, "dim 0")
    (Dim('N'), 4)
    """
    if a == b:
        return a
    if isinstance(a, Dim) and isinstance(b, int):
        return b
    if isinstance(b, Dim) and isinstance(a, int):
        return a
    raise ShapeError(f"{what}: {a} vs {b}")


def require_static(values, what: str) -> None:
    """ShapeError unless every value is a plain int: attrs the numpy references must read
    (sizes, pads, repeats) cannot stay symbolic."""
    for v in values:
        if isinstance(v, Dim):
            raise ShapeError(f"{what} must be static ints, got symbolic {v}")
