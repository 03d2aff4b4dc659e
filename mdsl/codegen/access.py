"""Affine addressing helpers: contiguous strides, broadcasting, permuted and sliced views."""

from __future__ import annotations

from mdsl.codegen.dims import render_dim
from mdsl.codegen.kir import Access, Rowwise
from mdsl.ir.dtype import DType


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def broadcast_strides(shape: tuple[int, ...], space: tuple[int, ...]) -> tuple[int, ...]:
    """Strides to read a contiguous `shape` tensor broadcast over iteration `space`
    (numpy rules: trailing alignment, stride 0 where the tensor's dim is 1 or missing)."""
    own = contiguous_strides(shape)
    lead = len(space) - len(shape)
    out = []
    for i, d in enumerate(space):
        j = i - lead
        out.append(0 if j < 0 or (shape[j] == 1 and d != 1) else own[j])
    return tuple(out)


def axis_aligned_strides(size: int, axis: int, space: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a 1-D per-axis parameter (one value per index of `axis`) over `space`."""
    if size == 1:
        return (0,) * len(space)
    return tuple(1 if i == axis % len(space) else 0 for i in range(len(space)))


def contiguous(buffer: str, dtype: DType, shape: tuple[int, ...]) -> Access:
    return Access(buffer, dtype, 0, contiguous_strides(shape))


def broadcast(buffer: str, dtype: DType, shape, space) -> Access:
    return Access(buffer, dtype, 0, broadcast_strides(tuple(shape), tuple(space)))


def permuted(access: Access, perm: tuple[int, ...]) -> Access:
    """The access seen through a transpose: output dim i reads input dim perm[i]."""
    return Access(
        access.buffer, access.dtype, access.offset, tuple(access.strides[p] for p in perm)
    )


def flat_index(access: Access, index_vars: list[str], lang: str = "c") -> str:
    """`offset + sum(index * stride)` of `access` over `index_vars`, rendered for `lang`."""
    terms = [render_dim(access.offset, lang)] if access.offset else []
    for var, stride in zip(index_vars, access.strides):
        if stride == 1:
            terms.append(var)
        elif stride:
            terms.append(f"{var} * {render_dim(stride, lang)}")
    return " + ".join(terms) or "0"


def merge_dims(shape: tuple[int, ...], accesses: list[Access]):
    """Drop size-1 dims and merge adjacent dims every access walks contiguously."""
    dims = [(d, [a.strides[i] for a in accesses]) for i, d in enumerate(shape) if d != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, strides in dims:
        if merged:
            prev_size, prev_strides = merged[-1]
            if all(ps == s * size for ps, s in zip(prev_strides, strides)):
                merged[-1] = (prev_size * size, strides)
                continue
        merged.append((size, strides))
    if not merged:
        merged = [(1, [0] * len(accesses))]
    return merged


def with_strides(access: Access, strides: list[int]) -> Access:
    """`access` walking `strides` instead (after `merge_dims`)."""
    return Access(access.buffer, access.dtype, access.offset, tuple(strides))


def row_offset(k: Rowwise, access: Access, row_stride: dict, n_outer: int, lang: str = "c") -> str:
    """The offset of `access` inside row `j` of a row kernel (empty: the row base)."""
    if id(access) in row_stride:
        s = row_stride[id(access)]
        return "" if s == 0 else ("j" if s == 1 else f"j * {render_dim(s, lang)}")
    terms = [f"j{d} * {render_dim(s, lang)}" for d, s in enumerate(access.strides[n_outer:]) if s]
    return " + ".join(terms)
