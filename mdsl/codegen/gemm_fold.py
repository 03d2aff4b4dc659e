"""GEMM rewrites that compute the same thing faster.

Batched GEMMs that are one GEMM: `[B, M, K] @ [K, N]` with one shared right operand
and a row-contiguous left operand is `[B*M, K] @ [K, N]`.

A batch of small-M products (nn.MultiheadAttention's `[17, 1, 768] @ [768, 2304]`) runs
as B matrix-vector products otherwise: BLAS packs B once per call instead of once, and
each call is too small to use the vector units well. Folding is legal when the batch
dims and the row dim of the left operand, the output and every epilogue access merge
into one dim (each stride is the next one times its size).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from mdsl import expr as E
from mdsl.codegen import kir


def fold_batch_into_rows(g: kir.Gemm) -> kir.Gemm:
    """`g` with its batch dims merged into its rows when that is the same computation,
    else `g` itself.

    >>> from mdsl.ir.dtype import DType
    >>> acc = lambda s: kir.Access("buf", DType.float32, 0, s)
    >>> g = kir.Gemm("k", [], DType.float32, (17,), acc((768,)), acc((0,)), acc((2304,)),
    ...              1, 2304, 768, False, False, 768, 2304, 1.0, None, (17, 1, 2304))
    >>> f = fold_batch_into_rows(g)
    >>> f.batch_shape, f.m, f.out_shape
    ((), 17, (17, 2304))
    """
    if not g.batch_shape or g.trans_a or any(s != 0 for s in g.b.strides):
        return g
    rows = (*g.batch_shape, g.m)
    a = _merged(rows, (*g.a.strides, g.lda))
    out = _merged(rows, (*g.out.strides, g.n))
    if a != _merged_lda(g, a) or out != g.n:
        return g
    epilogue = g.epilogue
    if epilogue is not None:
        epilogue = _fold_epilogue(epilogue, rows)
        if epilogue is None:
            return g
    return dataclasses.replace(
        g,
        batch_shape=(),
        a=dataclasses.replace(g.a, strides=()),
        b=dataclasses.replace(g.b, strides=()),
        out=dataclasses.replace(g.out, strides=()),
        m=math.prod(rows),
        lda=a,
        epilogue=epilogue,
        out_shape=(math.prod(rows), g.n),
    )


def _merged_lda(g: kir.Gemm, merged: object) -> object:
    """The row stride the folded left operand must have: its own `lda`, unless its rows
    are one row (a transposed `[1, S, K]` read as `[S, 1, K]`, as nn.MultiheadAttention
    exports it), whose stride is free: then the batch stride, if rows do not overlap."""
    if g.m == 1 and isinstance(merged, int) and merged >= g.k:
        return merged
    return g.lda


def _fold_epilogue(e: kir.Epilogue, rows: tuple) -> kir.Epilogue | None:
    """The epilogue over (rows merged, columns), or None if an access does not merge."""
    depth = len(rows)
    loads = {}
    for name, access in e.loads.items():
        folded = _fold_access(access, rows, depth)
        if folded is None:
            return None
        loads[name] = folded
    stores = []
    for store in e.stores:
        folded = _fold_access(store.access, rows, depth)
        if folded is None:
            return None
        stores.append(dataclasses.replace(store, access=folded))
    return dataclasses.replace(e, loads=loads, stores=stores)


def _fold_access(access: kir.Access, rows: tuple, depth: int) -> kir.Access | None:
    merged = _merged(rows, access.strides[:depth])
    if merged is None:
        return None
    return dataclasses.replace(access, strides=(merged, *access.strides[depth:]))


def _merged(sizes: tuple, strides: tuple) -> object | None:
    """The one stride of `sizes` (with `strides`) merged into one dim, or None when
    they do not merge. Size-1 dims never matter; symbolic sizes merge only if their
    strides chain exactly."""
    kept = [(n, s) for n, s in zip(sizes, strides) if not (isinstance(n, int) and n == 1)]
    if not kept:
        return 0
    for (_, outer), (inner_size, inner) in itertools.pairwise(kept):
        if outer != inner * inner_size:
            return None
    return kept[-1][1]


def fold_scale_into_alpha(g: kir.Gemm) -> kir.Gemm:
    """`g` with an epilogue that only scales the product by a constant (attention's
    `Q·Kᵀ * 0.125`, `Q·Kᵀ / 8`) made its `alpha`: the library scales each element as it
    stores it, which is the same rounding (`alpha * acc`), and no second pass runs. A
    division counts only by a power of two, whose reciprocal is exact.

    >>> from mdsl.ir.dtype import DType
    >>> acc = lambda s: kir.Access("c", DType.float32, 0, s)
    >>> e = kir.Epilogue({}, [kir.Let("v", E.var("acc") / 8.0, DType.float32)],
    ...                  [kir.Store(acc((64, 1)), E.var("v"))])
    >>> g = kir.Gemm("k", [], DType.float32, (), acc(()), acc(()), acc(()),
    ...              4, 64, 32, False, True, 32, 32, 1.0, e, (4, 64))
    >>> f = fold_scale_into_alpha(g)
    >>> f.alpha, f.epilogue
    (0.125, None)
    """
    e = g.epilogue
    if e is None or g.alpha != 1.0 or e.loads or len(e.lets) != 1 or len(e.stores) != 1:
        return g
    let, store = e.lets[0], e.stores[0]
    whole = (*g.out.strides, g.n, 1)
    if store.access.buffer != g.out.buffer or tuple(store.access.strides) != whole:
        return g
    if store.access.offset != g.out.offset or not _is_var(store.value, let.var):
        return g
    scale = _scale_of(let.value)
    if scale is None or let.dtype != g.dtype:
        return g
    return dataclasses.replace(g, alpha=g.alpha * scale, epilogue=None)


def _is_var(e: E.Expr, name: str) -> bool:
    return e.op == "var" and e.value == name


def _scale_of(value: E.Expr) -> float | None:
    """c when `value` is `acc * c`, `c * acc` or `acc / c` (c a power of two)."""
    if value.op not in ("mul", "div") or len(value.args) != 2:
        return None
    x, y = value.args
    if value.op == "mul" and x.op == "const":
        x, y = y, x
    if not _is_var(x, "acc") or y.op != "const" or isinstance(y.value, bool):
        return None
    c = float(y.value)
    if not math.isfinite(c) or c == 0.0:
        return None
    if value.op == "mul":
        return c
    mantissa, exponent = math.frexp(c)
    return 1.0 / c if abs(mantissa) == 0.5 and -100 < exponent < 100 else None
