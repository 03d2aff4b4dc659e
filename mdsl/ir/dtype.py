"""Element types. bfloat16 comes from ml_dtypes so numpy arrays can hold it."""

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
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"

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


_NUMPY = {
    DType.bool_: np.dtype(np.bool_),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.int16: np.dtype(np.int16),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
}
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}
_BY_NAME = {d.value: d for d in DType} | {"bool_": DType.bool_}

FLOATS = frozenset({DType.float16, DType.bfloat16, DType.float32, DType.float64})
INTS = frozenset({DType.int8, DType.uint8, DType.int16, DType.int32, DType.int64})
ALL = frozenset(DType)
NUMERIC = FLOATS | INTS
