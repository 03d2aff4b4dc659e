"""Output arrays whose memory a compiled variant reuses once the caller has let go of it.

A large `np.empty` is a fresh `mmap` (glibc maps allocations above its threshold, at
most 32 MiB, afresh each time), so a kernel writing a new 48 MiB output faults in every
page on every call: half the time of a large softmax. A pool keeps the memory of each
large output and hands it out again when no array made from it is alive: every view of
a pooled array (slices, reshapes, `np.asarray`, a memoryview, a torch tensor from
`torch.from_numpy`) holds a reference to the pooled base array, so its reference count
says whether the caller still holds any of it. Memory the caller holds is never handed
out again: the next call gets another buffer.

>>> pool = OutputPool()
>>> a = pool.array(0, (512, 1024), np.float32)
>>> a[:] = 1.0
>>> b = pool.array(0, (512, 1024), np.float32)   # `a` is held: other memory
>>> bool(np.shares_memory(a, b))
False
>>> address = b.ctypes.data
>>> del b
>>> pool.array(0, (512, 1024), np.float32).ctypes.data == address  # reused
True
>>> float(a.min())  # never overwritten
1.0
>>> a.ctypes.data % 64   # a cache line's start
0

A pool belongs to one thread (the check and the hand-out are not atomic); small outputs
come from `np.empty`, which is cheap for them.
"""

from __future__ import annotations

import math
import sys

import numpy as np

MIN_BYTES = 1 << 20  # below this malloc reuses freed memory itself (and a pool costs more)
KEEP = 2  # buffers kept per output: the caller may hold the previous result meanwhile
# Arrays start at a cache line: numpy's large arrays start 16 bytes into a page, and a
# softmax writing rows of 128 floats at that offset took 3% longer (split stores)
ALIGN = 64


def cache_line_view(raw: np.ndarray, nbytes: int) -> np.ndarray:
    """The `nbytes` of uint8 array `raw` (ALIGN bytes longer than that) from its first
    cache line's start on."""
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes]


def cache_line_empty(nbytes: int) -> np.ndarray:
    """`nbytes` of new uint8 memory starting at a cache line."""
    return cache_line_view(np.empty(nbytes + ALIGN, np.uint8), nbytes)


def _refs(bases: list, i: int) -> int:
    return sys.getrefcount(bases[i])


_FREE_REFS = _refs([object()], 0)  # an object only a list refers to, as counted here


def pooled(shape: tuple[int, ...], dtype: np.dtype) -> bool:
    """Whether `OutputPool.array` keeps the memory of an output of this shape and dtype
    (a caller that knows the answer ahead may call `np.empty` itself for the others)."""
    return math.prod(shape) * dtype.itemsize >= MIN_BYTES and not dtype.hasobject


class OutputPool:
    """Per output slot, up to `KEEP` base buffers; `array` hands out a view of one the
    caller no longer holds, or of a new one."""

    def __init__(self):
        self._bases: dict[int, list[np.ndarray]] = {}

    def array(self, slot: int, shape: tuple[int, ...], dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        if not pooled(shape, dtype):
            return np.empty(shape, dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        bases = self._bases.setdefault(slot, [])
        base = self._unheld(bases, nbytes + ALIGN)
        if base is None:
            base = np.empty(nbytes + ALIGN, np.uint8)
            bases.insert(0, base)
            del bases[KEEP:]  # a held buffer dropped here is the caller's alone now
        return cache_line_view(base, nbytes).view(dtype).reshape(shape)

    @staticmethod
    def _unheld(bases: list[np.ndarray], nbytes: int) -> np.ndarray | None:
        """A base of at least `nbytes` (and not wastefully larger) no array refers to."""
        for i in range(len(bases)):
            if _refs(bases, i) == _FREE_REFS and nbytes <= bases[i].nbytes <= 2 * nbytes:
                return bases[i]
        return None

    def held_bytes(self) -> int:
        """Bytes of the buffers the pool keeps (free or held by a caller)."""
        return sum(b.nbytes for bases in self._bases.values() for b in bases)
