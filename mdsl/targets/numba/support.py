"""What generated numba modules import: scalar helpers, GEMM, half-float staging.

The scalar helpers are `@njit` functions with C/ONNX meaning where numba's own differs
(integer division truncates, `fmod` of integers takes the dividend's sign, float-to-int
casts saturate); kernels call them, and numba inlines them. GEMM runs through numpy's
`matmul` on strided views (numba's `np.dot` would need SciPy). numba has no float16 or
bfloat16 arithmetic, so a kernel touching a half-float buffer gets a float32 copy of it
(`widen`) and the driver rounds what it wrote back (`narrow`), one rounding per store
exactly as the C target does.

>>> import numpy as np
>>> from mdsl.targets.numba import support as s
>>> int(s.idiv(-7, 2)), int(s.ifmod(-7, 2)), int(s.imod(-7, 2))
(-3, -1, 1)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mdsl.ir.dtype import DType

BFLOAT16 = DType.bfloat16.np
FLOAT16 = DType.float16.np
HALF_DTYPES = (BFLOAT16, FLOAT16)


# -- scalar helpers (integer arithmetic with C / numpy meaning) -----------------------------------
@njit(cache=True, inline="always", error_model="numpy")
def idiv(a, b):
    """a / b truncated toward zero; 0 when b is 0 (numpy's integer result)."""
    if b == 0:
        return a - a
    q = a // b
    if q * b != a and ((a < 0) != (b < 0)):
        q += 1
    return q


@njit(cache=True, inline="always", error_model="numpy")
def ifmod(a, b):
    """Remainder with the dividend's sign (C `%`, numpy `fmod`); 0 when b is 0."""
    if b == 0:
        return a - a
    return a - idiv(a, b) * b


@njit(cache=True, inline="always", error_model="numpy")
def imod(a, b):
    """Remainder with the divisor's sign (Python `%`, numpy `mod`); 0 when b is 0."""
    if b == 0:
        return a - a
    return a % b


@njit(cache=True, inline="always", error_model="numpy")
def ipow(base, e):
    """Integer power by squaring; a negative exponent gives 0 (as the C target)."""
    result = base - base + 1
    if e < 0:
        return result - 1
    while e:
        if e & 1:
            result *= base
        base *= base
        e >>= 1
    return result


@njit(cache=True, inline="always", error_model="numpy")
def saturate(x, lo, hi):
    """`x` clipped to [lo, hi], NaN -> 0: a float about to become an integer."""
    if x != x:
        return 0.0
    if x <= lo:
        return lo
    if x >= hi:
        return hi
    return x


# -- GEMM ----------------------------------------------------------------------------------------
def matrix_view(flat: np.ndarray, offset: int, batch_strides, batch_shape, rows, cols, ld, trans):
    """The (*batch, rows, cols) operand stored row-major with leading dim `ld` at element
    `offset` of `flat` (`trans`: stored as (cols, rows))."""
    item = flat.itemsize
    inner = (item, ld * item) if trans else (ld * item, item)
    strides = tuple(s * item for s in batch_strides) + inner
    base = flat[offset:]
    if base.size == 0:
        return np.zeros((*batch_shape, rows, cols), flat.dtype)
    return np.lib.stride_tricks.as_strided(
        base, (*batch_shape, rows, cols), strides, writeable=False
    )


def gemm(a, b, out, out_offset: int, batch_shape, m: int, n: int, alpha: float) -> None:
    """out[offset:] viewed as (*batch, m, n) = alpha * a @ b (a, b: `matrix_view`s)."""
    size = int(np.prod(batch_shape, dtype=np.int64)) * m * n
    result = out[out_offset : out_offset + size].reshape((*batch_shape, m, n))
    np.matmul(a, b, out=result)
    if alpha != 1.0:
        np.multiply(result, result.dtype.type(alpha), out=result)


# -- half floats -----------------------------------------------------------------------------------
def widen(buffer: np.ndarray) -> np.ndarray:
    """A float32 copy of a float16/bfloat16 buffer, for a kernel to compute on."""
    return buffer.astype(np.float32)


def narrow(wide: np.ndarray, buffer: np.ndarray) -> None:
    """Round a kernel's float32 results back into the half-float `buffer` (nearest even)."""
    buffer[...] = wide.astype(buffer.dtype)


# -- data movement ---------------------------------------------------------------------------------
def strided_copy(src, src_offset: int, shape, src_strides, dst, dst_offset: int, dst_strides):
    """dst[dst_offset + i . dst_strides] = src[src_offset + i . src_strides] for every index
    i of `shape`: a transpose, slice, broadcast or concatenation part, copied by numpy
    (nothing to compile)."""
    if 0 in shape:
        return
    np.copyto(
        _strided(dst, dst_offset, shape, dst_strides), _strided(src, src_offset, shape, src_strides)
    )


def _strided(flat: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(
        flat[offset:], tuple(shape), tuple(s * item for s in strides)
    )
