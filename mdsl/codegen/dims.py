"""Symbolic dims in generated code: substitution, renaming, rendering and evaluation.

A plan built from a graph with symbolic dims keeps them in Kernel IR as `mdsl.ir.dim.Dim`
expressions: shapes, strides, offsets, GEMM sizes and buffer sizes alike. Before
rendering, `rename_symbols` turns every symbol into its slot's identifier (`dim0`,
`dim1`, ...: user symbol names may be any identifier, a C keyword or a generated local
name included), so targets render a dim with `render_dim` alone: C and Python agree on
`+ - *` and, dims being non-negative, C's `/` and `%` are floor division and modulo.

>>> from mdsl.ir.dim import Dim
>>> n = Dim("N")
>>> d = substitute(3 * ((n + 1) // 2) + n * 4, {"N": Dim("dim0")})
>>> render_dim(d, "c"), render_dim(d, "py")
('(3 * ((dim0 + 1) / 2) + 4 * dim0)', '(3 * ((dim0 + 1) // 2) + 4 * dim0)')
>>> evaluate_size(d, {"dim0": 5})
29
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import numpy as np

from mdsl.expr import Expr
from mdsl.ir.dim import Dim


def is_symbolic(value) -> bool:
    return isinstance(value, Dim)


def substitute(d, mapping: Mapping[str, object]):
    """`d` with each symbol in `mapping` replaced by its value (an int or a Dim); other
    symbols stay. Arithmetic re-simplifies: a fully bound expression becomes an int."""
    if not isinstance(d, Dim) or not d.free_symbols & mapping.keys():
        return d  # untouched: a bare symbol keeps its declared range
    total = 0
    for mono, coeff in d.terms.items():
        term = coeff
        for atom in mono:
            if atom.kind == "sym":
                term = term * mapping.get(atom.name, Dim(atom.name))
            else:
                num = substitute(atom.num, mapping)
                term = term * (num // atom.den if atom.kind == "floordiv" else num % atom.den)
        total = total + term
    return total


def map_dims(obj, fn: Callable[[Dim], object]):
    """`obj` (Kernel IR records, lists, tuples, dicts) with every Dim replaced by `fn(dim)`;
    unchanged parts are returned as they are (the same objects). Expressions and arrays
    are left alone."""
    kind = type(obj)
    if kind in _LEAF_TYPES:  # most of what a plan holds: looked up before isinstance
        return obj
    if isinstance(obj, Dim):
        return fn(obj)
    if isinstance(obj, _LEAVES):
        return obj
    if isinstance(obj, (list, tuple)):
        items = None
        for i, old in enumerate(obj):
            if type(old) in _LEAF_TYPES:
                continue
            new = map_dims(old, fn)
            if new is not old:
                items = items or list(obj)
                items[i] = new
        if items is None:
            return obj
        return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, dict):
        items = {k: map_dims(v, fn) for k, v in obj.items()}
        return obj if all(items[k] is v for k, v in obj.items()) else items
    fields = _field_names(kind)
    if not fields:
        return obj
    changes = {}
    for name in fields:
        value = getattr(obj, name)
        if type(value) in _LEAF_TYPES:
            continue
        new = map_dims(value, fn)
        if new is not value:
            changes[name] = new
    return dataclasses.replace(obj, **changes) if changes else obj


_LEAF_TYPES = frozenset({str, int, float, bool, type(None)})
_LEAVES = (str, int, float, bool, type(None), Expr, np.ndarray, np.generic)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """The fields of dataclass `cls` (none for other classes); `dataclasses.fields` is too
    slow to ask for every record of a plan."""
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(f.name for f in dataclasses.fields(cls))


def free_symbols(obj) -> set[str]:
    """The symbols of every Dim inside `obj` (as `map_dims` walks it)."""
    found: set[str] = set()

    def collect(d: Dim):
        found.update(d.free_symbols)
        return d

    map_dims(obj, collect)
    return found


def rename_symbols(obj, names: Mapping[str, str]):
    """`obj` with symbol s renamed to `names[s]` in every Dim (each distinct Dim is
    rewritten once: a plan repeats the same few sizes in thousands of places)."""
    renamed = {old: Dim(new) for old, new in names.items()}
    done: dict[Dim, object] = {}

    def rename(d: Dim):
        if d not in done:
            done[d] = substitute(d, renamed)
        return done[d]

    return map_dims(obj, rename)


def render_dim(d, lang: str = "c") -> str:
    """A dim (int or Dim over slot identifiers) as an int64 expression in `lang` ("c" or
    "py"); compound expressions are parenthesized."""
    if not isinstance(d, Dim):
        return str(int(d))
    terms = []
    for mono, coeff in d.terms.items():
        factors = [_atom_text(atom, lang) for atom in mono]
        if not factors:
            factors = [str(abs(coeff))]
        elif abs(coeff) != 1:
            factors.insert(0, str(abs(coeff)))
        terms.append(("-" if coeff < 0 else "+", " * ".join(factors)))
    sign, text = terms[0]
    out = ("-" if sign == "-" else "") + text
    for sign, text in terms[1:]:
        out += f" {sign} {text}"
    ((mono, coeff),) = d.terms.items() if len(d.terms) == 1 else ((None, None),)
    bare = mono is not None and len(mono) == 1 and coeff == 1  # a symbol or one atom
    return out if bare else f"({out})"


def _atom_text(atom, lang: str) -> str:
    if atom.kind == "sym":
        return atom.name
    op = "%" if atom.kind == "mod" else ("/" if lang == "c" else "//")
    return f"({render_dim(atom.num, lang)} {op} {atom.den})"


def evaluate_size(value, env: Mapping[str, int]) -> int:
    """An int, a Dim evaluated with `env`, or the largest of a tuple of them (negative
    sizes count as 0)."""
    if isinstance(value, tuple):
        return max((evaluate_size(v, env) for v in value), default=0)
    if isinstance(value, Dim):
        return max(0, value.evaluate(env))
    return max(0, int(value))
