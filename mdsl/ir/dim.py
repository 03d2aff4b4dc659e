"""Symbolic dimensions: integer polynomials over named symbols, with floor division.

Why a small class and not sympy: shape inference needs +, -, *, //, % and equality after
simplification of integer expressions, nothing more. A canonical polynomial (a sorted
map from monomials to integer coefficients) gives exactly that, compares and hashes
structurally, serializes as plain JSON, and costs microseconds; sympy would add a heavy
import and slow down building large graphs for no gain in what we can decide.

Floor division and modulo by an integer simplify when the division is exact; otherwise
they become opaque atoms that take part in the polynomial like symbols do.

>>> n, h = Dim("N"), Dim("H")
>>> str(n * h + n), str((2 * n + 4) // 2), (n + 1) - 1 == n
('H*N+N', 'N+2', True)
>>> str((n + 1) // 2), ((n + 1) // 2).evaluate({"N": 7})
('(N+1)//2', 4)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeGuard

import numpy as np

from mdsl.ir.errors import ShapeError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class _Atom:
    """A symbol or an opaque floor-division / modulo: the variables of a polynomial."""

    __slots__ = ("den", "key", "kind", "name", "num")

    def __init__(self, kind: str, name: str = "", num: Dim | None = None, den: int = 0):
        self.kind, self.name, self.num, self.den = kind, name, num, den
        self.key = name if kind == "sym" else f"({num}){'//' if kind == 'floordiv' else '%'}{den}"
        if num is not None and _is_simple(num):
            self.key = f"{num}{'//' if kind == 'floordiv' else '%'}{den}"

    def __eq__(self, other):
        return isinstance(other, _Atom) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __lt__(self, other):
        return self.key < other.key

    @property
    def operand(self) -> Dim:
        """The dividend of a floor-division or modulo atom."""
        if self.num is None:
            raise ShapeError(f"symbol {self.name} has no operand")
        return self.num

    def evaluate(self, env: Mapping[str, int]) -> int:
        if self.kind == "sym":
            if self.name not in env:
                raise ShapeError(f"symbolic dim {self.name} has no value bound")
            return int(env[self.name])
        value = self.operand.evaluate(env)
        return value // self.den if self.kind == "floordiv" else value % self.den


def _is_simple(d: Dim) -> bool:
    return len(d.terms) == 1 and next(iter(d.terms.values())) == 1


class Dim:
    """A dimension size known only by name, or an integer expression of such names.

    `Dim("N", min=1, max=64)` declares a symbol with a range the runtime checks feeds
    against. Arithmetic with ints and other Dims builds canonical expressions; an
    expression that simplifies to a constant comes back as a plain `int`.
    """

    __slots__ = ("max", "min", "terms")

    def __init__(self, name: str | None = None, min: int = 0, max: int | None = None):
        self.terms: dict[tuple[_Atom, ...], int] = {}
        self.min, self.max = min, max
        if name is not None:
            if not isinstance(name, str) or not _NAME.match(name):
                raise ShapeError(f"a symbolic dim name must be an identifier, got {name!r}")
            if max is not None and max < min:
                raise ShapeError(f"Dim {name}: max ({max}) < min ({min})")
            if min < 0:
                raise ShapeError(f"Dim {name}: min ({min}) is negative")
            self.terms = {(_Atom("sym", name),): 1}

    # -- construction --------------------------------------------------------------------
    @staticmethod
    def _from_terms(terms: dict) -> Dim | int:
        terms = {m: c for m, c in terms.items() if c != 0}
        if not terms:
            return 0
        if list(terms) == [()]:
            return terms[()]
        d = Dim()
        d.terms = dict(sorted(terms.items(), key=lambda mc: _monomial_sort_key(mc[0])))
        return d

    @property
    def name(self) -> str | None:
        """The symbol's name when this Dim is a bare symbol, else None."""
        if len(self.terms) == 1:
            ((mono, coeff),) = self.terms.items()
            if coeff == 1 and len(mono) == 1 and mono[0].kind == "sym":
                return mono[0].name
        return None

    @property
    def free_symbols(self) -> set[str]:
        out: set[str] = set()
        for mono in self.terms:
            for atom in mono:
                if atom.kind == "sym":
                    out.add(atom.name)
                else:
                    out |= _free(atom.num)
        return out

    # -- arithmetic ----------------------------------------------------------------------
    def __add__(self, other):
        other = _terms_of(other)
        if other is None:
            return NotImplemented
        terms = dict(self.terms)
        for m, c in other.items():
            terms[m] = terms.get(m, 0) + c
        return Dim._from_terms(terms)

    __radd__ = __add__

    def __neg__(self):
        return Dim._from_terms({m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        other_terms = _terms_of(other)
        if other_terms is None:
            return NotImplemented
        return self + Dim._from_terms({m: -c for m, c in other_terms.items()})

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        other = _terms_of(other)
        if other is None:
            return NotImplemented
        terms: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.items():
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Dim._from_terms(terms)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if isinstance(other, Dim):
            if other == self:
                return 1
            raise ShapeError(f"cannot divide {self} by the symbolic {other}")
        if not _is_int(other):
            return NotImplemented
        other = int(other)
        if other <= 0:
            raise ShapeError(f"cannot divide {self} by {other}")
        if other == 1:
            return self
        if all(c % other == 0 for c in self.terms.values()):
            return Dim._from_terms({m: c // other for m, c in self.terms.items()})
        return Dim._from_terms({(_Atom("floordiv", num=self, den=other),): 1})

    def __mod__(self, other):
        if not _is_int(other) or int(other) <= 0:
            raise ShapeError(f"cannot take {self} modulo {other}")
        other = int(other)
        if all(c % other == 0 for c in self.terms.values()):
            return 0
        return Dim._from_terms({(_Atom("mod", num=self, den=other),): 1})

    def __truediv__(self, other):
        """Exact division only: a shape rule that divides must not round silently."""
        result = self.__floordiv__(other)
        if result is NotImplemented or (result * other) == self:
            return result
        raise ShapeError(f"{self} is not divisible by {other}; use // for floor division")

    def __rfloordiv__(self, other):
        # int // Dim: only an exact symbolic quotient could be right, and none is known
        raise ShapeError(f"cannot divide {other} by the symbolic {self}")

    __rtruediv__ = __rfloordiv__

    def __rmod__(self, other):
        raise ShapeError(f"cannot take {other} modulo the symbolic {self}")

    # -- comparison ----------------------------------------------------------------------
    def __eq__(self, other):
        if isinstance(other, Dim):
            return self.terms == other.terms
        return False  # a Dim never equals a constant: constants are plain ints

    def __hash__(self):
        return hash(tuple(self.terms.items()))

    def __bool__(self):
        return True

    def __index__(self):
        raise ShapeError(f"symbolic dim {self} used where a concrete integer is required")

    # -- evaluation and printing -----------------------------------------------------------
    def evaluate(self, env: Mapping[str, int]) -> int:
        """The integer value of this expression once its symbols are bound."""
        total = 0
        for mono, coeff in self.terms.items():
            term = coeff
            for atom in mono:
                term *= atom.evaluate(env)
            total += term
        return total

    def __str__(self):
        parts = []
        for mono, coeff in self.terms.items():
            body = "*".join(a.key for a in mono)
            if not mono:
                text = str(abs(coeff))
            elif abs(coeff) == 1:
                text = body
            else:
                text = f"{abs(coeff)}*{body}"
            sign = "-" if coeff < 0 else "+"
            parts.append((sign, text))
        first_sign, first = parts[0]
        out = ("-" if first_sign == "-" else "") + first
        return out + "".join(s + t for s, t in parts[1:])

    def __repr__(self):
        return f"Dim({str(self)!r})" if self.name is None else f"Dim({self.name!r})"

    # -- serialization -----------------------------------------------------------------------
    def to_json(self):
        """A JSON-able form; `dim_from_json` reverses it (ranges of bare symbols included)."""
        out: dict[str, object] = {
            "terms": [[[_atom_to_json(a) for a in m], c] for m, c in self.terms.items()]
        }
        if self.min != 0 or self.max is not None:
            out["range"] = [self.min, self.max]
        return out


def _atom_to_json(atom: _Atom):
    if atom.kind == "sym":
        return atom.name
    return {atom.kind: atom.operand.to_json(), "den": atom.den}


def _atom_from_json(obj) -> _Atom:
    if isinstance(obj, str):
        if not _NAME.match(obj):
            raise ShapeError(f"bad symbol name {obj!r}")
        return _Atom("sym", obj)
    if not isinstance(obj, dict) or "den" not in obj:
        raise ShapeError(f"bad dim atom {obj!r}")
    kind = "floordiv" if "floordiv" in obj else "mod"
    num = dim_from_json(obj.get(kind))
    den = obj["den"]
    if not isinstance(num, Dim) or not _is_int(den) or den <= 0:
        raise ShapeError(f"bad dim atom {obj!r}")
    return _Atom(kind, num=num, den=int(den))


def dim_from_json(obj) -> Dim | int:
    """Rebuild a dim from `Dim.to_json()` output (or pass an int through)."""
    if _is_int(obj):
        return int(obj)
    if not isinstance(obj, dict) or not isinstance(obj.get("terms"), list):
        raise ShapeError(f"bad symbolic dim {obj!r}")
    terms = {}
    for item in obj["terms"]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)):
            raise ShapeError(f"bad symbolic dim term {item!r}")
        mono, coeff = item
        if not _is_int(coeff):
            raise ShapeError(f"bad symbolic dim coefficient {coeff!r}")
        terms[tuple(sorted(_atom_from_json(a) for a in mono))] = int(coeff)
    dim = Dim._from_terms(terms)
    if "range" in obj and isinstance(dim, Dim):
        lo, hi = (
            obj["range"]
            if isinstance(obj["range"], list) and len(obj["range"]) == 2
            else (None, None)
        )
        if (
            not _is_int(lo)
            or not (hi is None or _is_int(hi))
            or lo < 0
            or (hi is not None and hi < lo)
        ):
            raise ShapeError(f"bad symbolic dim range {obj['range']!r}")
        dim.min, dim.max = int(lo), hi
    return dim


def _free(d) -> set[str]:
    return d.free_symbols if isinstance(d, Dim) else set()


def _monomial_sort_key(mono):
    # higher degree first, constants last: "N*H+N+1"
    return (-len(mono) if mono else 1, [a.key for a in mono])


def _is_int(x) -> TypeGuard[int]:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _terms_of(x):
    if isinstance(x, Dim):
        return x.terms
    if _is_int(x):
        return {(): int(x)} if int(x) else {}
    return None


def as_dim(value, *, where: str = "shape") -> int | Dim:
    """Normalize one declared dim: ints stay ints, strings become symbols.

    >>> as_dim(3), as_dim("N")
    (3, Dim('N'))
    """
    if isinstance(value, Dim):
        return value
    if isinstance(value, str):
        return Dim(value)
    if isinstance(value, bool) or not _is_int(value):
        raise ShapeError(f"{where}: a dim must be an int, a name or a Dim, got {value!r}")
    value = int(value)
    if value < 0:
        raise ShapeError(f"{where}: negative dim {value}")
    if value > MAX_DIM:
        raise ShapeError(f"{where}: absurd dim {value} (more than {MAX_DIM})")
    return value


MAX_DIM = 2**40


def is_static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def dims_equal(a, b) -> bool:
    return (isinstance(a, int) and isinstance(b, int) and a == b) or (
        isinstance(a, Dim) and isinstance(b, Dim) and a == b
    )


def evaluate_dims(value, symbols: Mapping[str, int]):
    """`value` with every symbolic Dim (also inside tuples and lists) evaluated.

    >>> evaluate_dims((Dim("N") * 2, 3), {"N": 4})
    (8, 3)
    """
    if isinstance(value, Dim):
        return value.evaluate(symbols)
    if isinstance(value, (tuple, list)) and any(isinstance(v, (Dim, tuple, list)) for v in value):
        return type(value)(evaluate_dims(v, symbols) for v in value)
    return value
