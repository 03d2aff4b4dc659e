"""Checking feeds against a graph's declared inputs and binding its symbolic dims.

Bare symbols (`"N"`, `Dim("N", max=64)`) are bound by the first input dim that uses
them; every later use must agree, and the size must lie in the range the symbol was
declared with (the tightest one, where several inputs declare it). Dims that are
expressions (`2*N`, `N+1`) are checked once their symbols are bound; an expression with
a single unbound symbol binds it when exactly one size fits (an input declared `(2*N,)`
alone binds N to half its size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.errors import ExecutionError, ShapeError
from mdsl.ir.graph import Graph
from mdsl.ir.tensor_type import TensorType


@dataclass
class _Bindings:
    """Symbol sizes found so far, where each came from, and each symbol's declared range."""

    ranges: dict[str, tuple[int, int | None]]
    sizes: dict[str, int] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)

    def bind(self, sym: str, size: int, where: str) -> None:
        if sym in self.sizes and self.sizes[sym] != size:
            raise ExecutionError(
                f"{where}: {sym} = {size}, but {self.origin[sym]} bound {sym} = {self.sizes[sym]}"
            )
        lo, hi = self.ranges.get(sym, (0, None))
        if size < lo or (hi is not None and size > hi):
            raise ExecutionError(
                f"{where}: {sym} = {size} is outside its range "
                f"[{lo}, {'inf' if hi is None else hi}]"
            )
        self.sizes[sym] = size
        self.origin.setdefault(sym, where)

    def describe(self, symbols) -> str:
        return ", ".join(f"{s} = {self.sizes[s]} from {self.origin[s]}" for s in sorted(symbols))


def bind_feeds(g: Graph, feeds: Mapping[str, np.ndarray]) -> tuple[dict, dict[str, int]]:
    """Validate `feeds` (names, dtypes, ranks, sizes, symbol consistency and ranges) and
    return (input name -> array, symbol -> size); ExecutionError on the first problem.

    >>> import numpy as np, mdsl
    >>> n = mdsl.Dim("N", max=8)
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (n, 2 * n))
    ...     g.output(x * 2.0, "y")
    >>> bind_feeds(g, {"x": np.zeros((4, 8), np.float32)})[1]
    {'N': 4}
    """
    if not isinstance(feeds, Mapping):
        raise ExecutionError(
            f"feeds must be a mapping of input name to array, got {type(feeds).__name__}"
        )
    declared = g.inputs
    _check_names(g.name, declared, feeds)
    state = _Bindings(_declared_ranges(t.type for t in declared.values()))
    env = {}
    expressions = []
    for name, tensor in declared.items():
        value = _as_array(name, tensor.type, feeds[name])
        _check_rank(name, tensor.type, value)
        for axis, (dim, size) in enumerate(zip(tensor.type.shape, value.shape)):
            where = f"input {name!r} dim {axis}"
            if isinstance(dim, int):
                if dim != size:
                    raise ExecutionError(f"{where}: size {size}, declared {dim}")
            elif dim.name is not None:
                state.bind(dim.name, size, where)
            else:
                expressions.append((where, dim, size))
        env[name] = value
    _check_expressions(expressions, state)
    return env, dict(state.sizes)


class FeedMatcher:
    """`bind_feeds` worked out ahead for one graph, for the feeds most calls pass: a dict
    of ndarrays of exactly the declared dtypes, ranks and sizes. `symbols(feeds)` returns
    the symbols' sizes for such feeds, and None for anything else (a list or scalar to
    convert, another mapping, an expression dim to solve, or a mistake), which
    `bind_feeds` then converts or reports. Accepted feeds are those `bind_feeds` accepts
    as they are, with the same sizes.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (mdsl.Dim("N", max=8), 3))
    ...     g.output(x * 2.0, "y")
    >>> matcher = FeedMatcher(g)
    >>> matcher.symbols({"x": np.zeros((4, 3), np.float32)})
    {'N': 4}
    >>> matcher.symbols({"x": np.zeros((9, 3), np.float32)}) is None  # N above its max
    True
    """

    def __init__(self, g: Graph):
        declared = g.inputs
        self._ranges = _declared_ranges(t.type for t in declared.values())
        self._specs = []  # (name, dtype, static shape or None, rank, dims: int or symbol)
        self.usable = True  # False: an input has an expression dim (bind_feeds solves it)
        for name, tensor in declared.items():
            dims = []
            for dim in tensor.type.shape:
                if isinstance(dim, int):
                    dims.append(dim)
                elif dim.name is not None:
                    dims.append(dim.name)
                else:
                    self.usable = False
            static = tuple(dims) if all(isinstance(d, int) for d in dims) else None
            self._specs.append((name, tensor.dtype.np, static, len(dims), tuple(dims)))
        self._count = len(self._specs)

    def symbols(self, feeds) -> dict[str, int] | None:
        if not self.usable or type(feeds) is not dict or len(feeds) != self._count:
            return None
        sizes: dict[str, int] = {}
        for name, dtype, static, rank, dims in self._specs:
            a = feeds.get(name)
            if type(a) is not np.ndarray or a.dtype != dtype:
                return None
            if static is not None:
                if a.shape != static:
                    return None
                continue
            if a.ndim != rank or not self._bind(dims, a.shape, sizes):
                return None
        return sizes

    def _bind(self, dims: tuple, shape: tuple, sizes: dict[str, int]) -> bool:
        for dim, size in zip(dims, shape):
            if type(dim) is int:
                if dim != size:
                    return False
                continue
            bound = sizes.get(dim)
            if bound is None:
                lo, hi = self._ranges[dim]
                if size < lo or (hi is not None and size > hi):
                    return False
                sizes[dim] = size
            elif bound != size:
                return False
        return True


def _check_names(graph: str, declared: Mapping, feeds: Mapping) -> None:
    missing = [n for n in declared if n not in feeds]
    extra = [n for n in feeds if n not in declared]
    if not (missing or extra):
        return
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing)}")
    if extra:
        known = ", ".join(declared) or "none"
        parts.append(f"unknown {', '.join(map(repr, extra))} (inputs: {known})")
    raise ExecutionError(f"graph {graph!r} feeds: " + "; ".join(parts))


def _declared_ranges(types) -> dict[str, tuple[int, int | None]]:
    ranges: dict[str, tuple[int, int | None]] = {}
    for ttype in types:
        for dim in ttype.shape:
            if isinstance(dim, Dim) and dim.name is not None:
                lo, hi = ranges.get(dim.name, (0, None))
                lo = max(lo, dim.min)
                hi = dim.max if hi is None else (hi if dim.max is None else min(hi, dim.max))
                ranges[dim.name] = (lo, hi)
    return ranges


def _as_array(name: str, ttype: TensorType, value) -> np.ndarray:
    want = ttype.dtype.np
    if isinstance(value, np.generic):  # a typed numpy scalar is held to its dtype like an array
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype != want:
            raise ExecutionError(
                f"input {name!r}: dtype {value.dtype}, declared {ttype.dtype}; "
                f"convert it with .astype(np.{want.name})"
            )
        return value
    if not isinstance(value, (bool, int, float, list, tuple)):
        raise ExecutionError(f"input {name!r}: expected a numpy array, got {type(value).__name__}")
    return _converted(name, ttype, value)


def _converted(name: str, ttype: TensorType, value) -> np.ndarray:
    """A Python scalar or (nested) list as the declared dtype, refusing lossy conversions."""
    want = ttype.dtype.np
    try:
        array = np.asarray(value)
    except ValueError as e:
        raise ExecutionError(f"input {name!r}: not a rectangular array ({e})") from None
    if array.dtype.kind not in "biuf" or not np.can_cast(array.dtype, want, "same_kind"):
        raise ExecutionError(
            f"input {name!r}: {array.dtype.name} values cannot be fed as {ttype.dtype}"
        )
    converted = array.astype(want)
    if want.kind in "biu" and not np.array_equal(converted, array):
        raise ExecutionError(f"input {name!r}: values do not fit in {ttype.dtype}")
    return converted


def _check_rank(name: str, ttype: TensorType, value: np.ndarray) -> None:
    if value.ndim != ttype.rank:
        raise ExecutionError(
            f"input {name!r}: rank {value.ndim} (shape {list(value.shape)}), "
            f"declared rank {ttype.rank} ({ttype.describe()})"
        )


def _check_expressions(pending: list, state: _Bindings) -> None:
    """Check expression dims, binding a lone unbound symbol where one size fits; repeat
    while that makes progress (one binding can make another expression checkable)."""
    while pending:
        waiting = []
        for where, dim, size in pending:
            unbound = dim.free_symbols - state.sizes.keys()
            if len(unbound) == 1:
                _solve(where, dim, size, unbound.pop(), state)
            elif not unbound:
                _check_value(where, dim, size, state)
            else:
                waiting.append((where, dim, size))
        if len(waiting) == len(pending):
            where, dim, _ = waiting[0]
            raise ExecutionError(
                f"{where}: cannot tell {', '.join(sorted(dim.free_symbols))} from the size of "
                f"{dim}; give one of them its own dim in some input"
            )
        pending = waiting


def _check_value(where: str, dim: Dim, size: int, state: _Bindings) -> None:
    expected = _evaluate(dim, state.sizes, where)
    if expected != size:
        raise ExecutionError(
            f"{where}: size {size}, declared {dim} = {expected} "
            f"({state.describe(dim.free_symbols)})"
        )


def _solve(where: str, dim: Dim, size: int, sym: str, state: _Bindings) -> None:
    """Bind `sym` so that `dim` == `size`, for dims linear in `sym` (`a*sym + b`)."""

    def at(v: int) -> int:
        return _evaluate(dim, {**state.sizes, sym: v}, where)

    b = at(0)
    a = at(1) - b
    if a == 0 or at(2) - at(1) != a:
        raise ExecutionError(
            f"{where}: cannot solve {dim} = {size} for {sym}; give {sym} its own dim in some input"
        )
    candidate = (size - b) // a if (size - b) % a == 0 else -1
    if candidate < 0 or at(candidate) != size:
        raise ExecutionError(f"{where}: size {size} fits {dim} for no size of {sym}")
    state.bind(sym, candidate, f"{where} ({dim} = {size})")


def _evaluate(dim: Dim, sizes: Mapping[str, int], where: str) -> int:
    try:
        return dim.evaluate(sizes)
    except ShapeError as e:
        raise ExecutionError(f"{where}: {e.message}") from None


def concrete_shape(shape: tuple, symbols: Mapping[str, int]) -> tuple[int, ...]:
    """`shape` with every symbolic dim evaluated."""
    try:
        return tuple(d.evaluate(symbols) if isinstance(d, Dim) else d for d in shape)
    except ShapeError as e:
        raise ExecutionError(e.message) from None
