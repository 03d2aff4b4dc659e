"""Checking feeds against a graph's declared inputs and binding its symbolic dims."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.errors import ExecutionError, ShapeError
from mdsl.ir.graph import Graph


def bind_feeds(g: Graph, feeds: Mapping[str, np.ndarray]) -> tuple[dict, dict[str, int]]:
    """Validate `feeds` (names, dtypes, ranks, sizes, symbol consistency and ranges) and
    return (input name -> array, symbol -> size)."""
    if not isinstance(feeds, Mapping):
        raise ExecutionError(
            f"feeds must be a mapping of input name to array, got {type(feeds).__name__}"
        )
    declared = g.inputs
    missing = [n for n in declared if n not in feeds]
    extra = [n for n in feeds if n not in declared]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unknown {', '.join(map(str, extra))} (inputs: {', '.join(declared)})")
        raise ExecutionError(f"graph {g.name!r} feeds: " + "; ".join(parts))
    symbols: dict[str, int] = {}
    bound_by: dict[str, str] = {}
    env = {}
    for name, tensor in declared.items():
        env[name] = _check_feed(name, tensor.type, feeds[name], symbols, bound_by)
    return env, symbols


def _check_feed(name, ttype, value, symbols, bound_by) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        if isinstance(value, (int, float, bool, list, tuple, np.generic)):
            value = np.asarray(value, dtype=ttype.dtype.np)
        else:
            raise ExecutionError(
                f"input {name!r}: expected a numpy array, got {type(value).__name__}"
            )
    if value.dtype != ttype.dtype.np:
        raise ExecutionError(f"input {name!r}: dtype {value.dtype}, declared {ttype.dtype}")
    if value.ndim != ttype.rank:
        raise ExecutionError(
            f"input {name!r}: rank {value.ndim} (shape {list(value.shape)}), "
            f"declared rank {ttype.rank} ({ttype.describe()})"
        )
    for axis, (dim, size) in enumerate(zip(ttype.shape, value.shape)):
        _check_dim(name, axis, dim, size, symbols, bound_by)
    return value


def _check_dim(name, axis, dim, size, symbols, bound_by) -> None:
    where = f"input {name!r} dim {axis}"
    if isinstance(dim, int):
        if dim != size:
            raise ExecutionError(f"{where}: size {size}, declared {dim}")
        return
    sym = dim.name
    if sym is None:  # an expression of symbols: checked once they are bound
        return
    if sym in symbols and symbols[sym] != size:
        raise ExecutionError(
            f"{where}: {sym} = {size}, but {bound_by[sym]} bound {sym} = {symbols[sym]}"
        )
    if size < dim.min or (dim.max is not None and size > dim.max):
        hi = "inf" if dim.max is None else dim.max
        raise ExecutionError(f"{where}: {sym} = {size} is outside its range [{dim.min}, {hi}]")
    symbols[sym] = size
    bound_by[sym] = f"input {name!r} dim {axis}"


def concrete_shape(shape: tuple, symbols: Mapping[str, int]) -> tuple[int, ...]:
    """`shape` with every symbolic dim evaluated."""
    try:
        return tuple(d.evaluate(symbols) if isinstance(d, Dim) else d for d in shape)
    except ShapeError as e:
        raise ExecutionError(e.message) from None
