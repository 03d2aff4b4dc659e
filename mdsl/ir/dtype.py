"""Element types. bfloat16 and the storage types come from ml_dtypes so numpy arrays can
hold them.

*Storage types* (float8, float4, int4, int2 and their unsigned forms) are formats values
are kept in, not computed in: ops that only move or convert data (Cast, Reshape,
Identity, ...) accept them, arithmetic does not (they are in no "float"/"int" class),
and compiled backends run the nodes touching them through the interpreter.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from mdsl.ir.errors import DTypeError


class DType(enum.Enum):
    bool_ = "bool"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e4m3fnuz = "float8_e4m3fnuz"
    float8_e5m2 = "float8_e5m2"
    float8_e5m2fnuz = "float8_e5m2fnuz"
    float8_e8m0fnu = "float8_e8m0fnu"
    float4_e2m1fn = "float4_e2m1fn"
    int4 = "int4"
    uint4 = "uint4"
    int2 = "int2"
    uint2 = "uint2"

    def __repr__(self) -> str:
        return f"mdsl.{self.name}"

    def __str__(self) -> str:
        return self.value

    @property
    def np(self) -> np.dtype:
        """The numpy dtype that holds values of this type."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOATS

    @property
    def is_int(self) -> bool:
        return self in INTS

    @property
    def is_unsigned(self) -> bool:
        return self in UNSIGNED

    @property
    def is_storage(self) -> bool:
        """A storage-only type (float8, int4, ...): see the module's docstring."""
        return self in STORAGE

    @staticmethod
    def of(value) -> DType:
        """Parse a DType from a DType, a numpy dtype (or type), or a dtype name string.

        >>> DType.of("float16"), DType.of(np.int64), DType.of("bool")
        (mdsl.float16, mdsl.int64, mdsl.bool_)
        """
        if isinstance(value, DType):
            return value
        if value is None:  # numpy reads None as float64; a missing dtype is a mistake here
            raise DTypeError("not a dtype: None")
        if isinstance(value, str):
            found = _BY_NAME.get(value)
            if found is None:
                raise DTypeError(f"unknown dtype {value!r}; expected one of {', '.join(_BY_NAME)}")
            return found
        try:
            key = np.dtype(value)
        except TypeError:
            raise DTypeError(f"not a dtype: {value!r}") from None
        found = _BY_NUMPY.get(key)
        if found is None:
            raise DTypeError(f"numpy dtype {key} has no mdsl equivalent")
        return found


_STORAGE_PREFIXES = ("float8_", "float4_", "int4", "uint4", "int2", "uint2")
_NUMPY = {
    DType.bool_: np.dtype(np.bool_),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.int16: np.dtype(np.int16),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.uint16: np.dtype(np.uint16),
    DType.uint32: np.dtype(np.uint32),
    DType.uint64: np.dtype(np.uint64),
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
    **{
        d: np.dtype(getattr(ml_dtypes, d.value))
        for d in DType
        if d.name.startswith(_STORAGE_PREFIXES)
    },
}
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}
_BY_NAME = {d.value: d for d in DType} | {"bool_": DType.bool_}

FLOATS = frozenset({DType.float16, DType.bfloat16, DType.float32, DType.float64})
UNSIGNED = frozenset({DType.uint8, DType.uint16, DType.uint32, DType.uint64})
INTS = frozenset({DType.int8, DType.int16, DType.int32, DType.int64}) | UNSIGNED
STORAGE = frozenset(d for d in DType if d.name.startswith(_STORAGE_PREFIXES))
ALL = frozenset(DType)
NUMERIC = FLOATS | INTS
