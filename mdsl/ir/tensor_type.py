"""TensorType: what a tensor is at build time (shape, dtype, format), never its data."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mdsl.ir.dim import Dim, as_dim, dim_from_json, is_static
from mdsl.ir.dtype import DType
from mdsl.ir.errors import ShapeError
from mdsl.ir.format import Format, storage_shape

MAX_TENSOR_BYTES = 1 << 62  # byte sizes and offsets must fit int64 in generated code


@dataclass(frozen=True, slots=True, init=False)
class TensorType:
    """Shape (ints and symbolic dims, `Dim`), dtype and format of a tensor.

    The origin shape and format are what the user declared. `storage_format` is set by the
    layout pass; the storage shape then follows from it.

    >>> t = TensorType(("N", 3, 224, 224), "float32", "NCHW")
    >>> t
    TensorType((N, 3, 224, 224), float32, NCHW)
    >>> t.with_storage("NC1HWC0").storage_shape
    (Dim('N'), 1, 224, 224, 16)
    """

    shape: tuple
    dtype: DType
    format: Format
    storage_format: Format | None

    def __init__(self, shape, dtype="float32", format="ND", storage_format=None):
        if isinstance(shape, (int, str, Dim)):
            shape = (shape,)
        try:
            dims = tuple(as_dim(d, where="shape") for d in shape)
        except TypeError:
            raise ShapeError(f"a shape must be a sequence of dims, got {shape!r}") from None
        fmt = Format.of(format)
        if fmt.rank is not None and len(dims) != fmt.rank:
            raise ShapeError(f"format {fmt} needs rank {fmt.rank}, got shape {_fmt_shape(dims)}")
        dtype = DType.of(dtype)
        _check_size(dims, dtype)
        object.__setattr__(self, "shape", dims)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "format", fmt)
        object.__setattr__(
            self, "storage_format", None if storage_format is None else Format.of(storage_format)
        )

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return is_static(self.shape)

    @property
    def numel(self) -> int | Dim:
        return math.prod(self.shape, start=1)

    @property
    def nbytes(self) -> int | Dim:
        return self.numel * self.dtype.itemsize

    @property
    def storage_shape(self) -> tuple:
        if self.storage_format is None:
            return self.shape
        return storage_shape(self.shape, self.format, self.storage_format)

    def with_storage(self, storage_format) -> TensorType:
        return TensorType(self.shape, self.dtype, self.format, storage_format)

    def with_shape(self, shape) -> TensorType:
        return TensorType(shape, self.dtype, self.format)

    def with_dtype(self, dtype) -> TensorType:
        return TensorType(self.shape, dtype, self.format, self.storage_format)

    def __repr__(self):
        fmt = "" if self.format == Format.ND else f", {self.format}"
        if self.storage_format is not None:
            fmt += f" as {self.storage_format}"
        return f"TensorType({_fmt_shape(self.shape)}, {self.dtype}{fmt})"

    def describe(self) -> str:
        """Short form for messages and tables: `float32[N,3,224,224]`."""
        fmt = "" if self.format == Format.ND else f" {self.format}"
        return f"{self.dtype}[{','.join(map(str, self.shape))}]{fmt}"

    def to_json(self, dim_json=None) -> dict:
        """A JSON-able form; `dim_json(d)` gives each symbolic dim's (default `d.to_json()`)."""
        dim_json = dim_json or Dim.to_json
        out = {
            "shape": [d if isinstance(d, int) else dim_json(d) for d in self.shape],
            "dtype": self.dtype.value,
            "format": self.format.value,
        }
        if self.storage_format is not None:
            out["storage_format"] = self.storage_format.value
        return out

    @staticmethod
    def from_json(obj) -> TensorType:
        if not isinstance(obj, dict) or not isinstance(obj.get("shape"), list):
            raise ShapeError(f"bad tensor type {obj!r:.80}")
        shape = tuple(dim_from_json(d) for d in obj["shape"])
        return TensorType(
            shape, obj.get("dtype"), obj.get("format", "ND"), obj.get("storage_format")
        )


def _fmt_shape(shape) -> str:
    inner = ", ".join(map(str, shape))
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def _check_size(dims: tuple, dtype: DType) -> None:
    """ShapeError when the static dims alone make the tensor too large for int64."""
    static = [d for d in dims if isinstance(d, int)]
    if len(static) > 1 and math.prod(static) * dtype.itemsize > MAX_TENSOR_BYTES:
        raise ShapeError(
            f"shape {_fmt_shape(dims)} of {dtype} holds more than {MAX_TENSOR_BYTES} bytes "
            "(its sizes would overflow int64)"
        )
