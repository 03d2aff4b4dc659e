"""Affine addressing helpers: contiguous strides, broadcasting, permuted and sliced views."""

from __future__ import annotations

from mdsl.codegen.kir import Access
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
