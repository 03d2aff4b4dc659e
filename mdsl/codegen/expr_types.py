"""The dtypes expressions compute in, shared by every target's expression renderer: half
floats compute in float32, a binary op of typed operands takes the wider type (a
constant adapts to the other operand).

>>> from mdsl.ir.dtype import DType
>>> compute_type(DType.float16), promote(DType.int32, DType.float32), promote(None, DType.int8)
(mdsl.float32, mdsl.float32, mdsl.int8)
"""

from __future__ import annotations

from mdsl.ir.dtype import DType

_RANK = {
    DType.bool_: 0,
    DType.int8: 1,
    DType.uint8: 1,
    DType.int16: 2,
    DType.int32: 3,
    DType.uint16: 2,
    DType.uint32: 3,
    DType.int64: 4,
    DType.uint64: 4,
    DType.float32: 5,
    DType.float64: 6,
}


def compute_type(dtype: DType) -> DType:
    return DType.float32 if dtype in (DType.float16, DType.bfloat16) else dtype


def promote(a: DType | None, b: DType | None) -> DType:
    """The type of a binary op of typed operands (None: a constant that adapts)."""
    if a is None:
        return b or DType.float32
    if b is None:
        return a
    return a if _RANK[a] >= _RANK[b] else b
