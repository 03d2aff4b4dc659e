"""Numpy references compute half floats (float16, bfloat16) in float32.

Composite formulas (GELU, softmax, normalizations) rounded to half precision after every
step drift far from what accelerators compute (they accumulate in float32), so the
reference widens half inputs once and rounds once at the end.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

HALF_FLOATS = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})


def widen(array):
    """`array` as float32 when it is a half float, else unchanged (None stays None)."""
    if array is not None and array.dtype in HALF_FLOATS:
        return array.astype(np.float32)
    return array


def computes_in_float32(reference):
    """Wrap a numpy reference: half-float arguments become float32, and when the first
    argument is a half float, floating results are rounded back to its dtype (references
    whose output dtype follows another argument cast it themselves).

    >>> import numpy as np
    >>> double = computes_in_float32(lambda x: x * 2)
    >>> double(np.ones(2, np.float16)).dtype
    dtype('float16')
    """

    @functools.wraps(reference)
    def run(*arrays, **attrs):
        half = arrays[0].dtype if arrays and arrays[0].dtype in HALF_FLOATS else None
        result = reference(*(widen(a) for a in arrays), **attrs)
        if half is None:
            return result
        if isinstance(result, tuple):
            return tuple(_narrow(r, half) for r in result)
        return _narrow(result, half)

    return run


def _narrow(result, half):
    result = np.asarray(result)
    return result.astype(half) if np.issubdtype(result.dtype, np.floating) else result
