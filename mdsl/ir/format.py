"""Data formats (layouts) and the storage shape a format gives a tensor.

A tensor keeps its origin shape and format (what the user declared) and, once the layout
pass has chosen one, a storage format whose shape is derived here:

>>> storage_shape((8, 3, 224, 224), Format.NCHW, Format.NC1HWC0)
(8, 1, 224, 224, 16)
>>> storage_shape((4, 100, 40), Format.ND, Format.FRACTAL_NZ)
(4, 3, 7, 16, 16)
"""

from __future__ import annotations

import enum

from mdsl.ir.errors import ShapeError


class Format(enum.Enum):
    ND = "ND"
    NCHW = "NCHW"
    NHWC = "NHWC"
    NC1HWC0 = "NC1HWC0"
    FRACTAL_NZ = "FRACTAL_NZ"

    def __repr__(self) -> str:
        return f"Format.{self.name}"

    def __str__(self) -> str:
        return self.value

    @staticmethod
    def of(value) -> Format:
        if isinstance(value, Format):
            return value
        try:
            return Format(value)
        except ValueError:
            names = ", ".join(f.value for f in Format)
            raise ShapeError(f"unknown format {value!r}; expected one of {names}") from None

    @property
    def rank(self) -> int | None:
        """The rank a shape in this format must have (None: any)."""
        return _RANKS.get(self)


_RANKS = {Format.NCHW: 4, Format.NHWC: 4, Format.NC1HWC0: 5}

# Ascend's fractal tiles are 16x16 elements; C0 is 16 for 16/32-bit types.
C0 = 16
FRACTAL = 16


def _ceil_div(a, b):
    return -(-a // b)


def storage_shape(shape: tuple, origin: Format, storage: Format) -> tuple:
    """The shape of a tensor of `shape` in `origin` format once stored as `storage`."""
    if storage == origin or storage == Format.ND:
        return tuple(shape)
    if storage == Format.NHWC:
        n, c, h, w = _as_nchw(shape, origin)
        return (n, h, w, c)
    if storage == Format.NC1HWC0:
        n, c, h, w = _as_nchw(shape, origin)
        return (n, _ceil_div(c, C0), h, w, C0)
    if storage == Format.FRACTAL_NZ:
        if len(shape) < 2:
            raise ShapeError(f"FRACTAL_NZ needs rank >= 2, got shape {tuple(shape)}")
        *batch, m, n = shape
        return (*batch, _ceil_div(n, FRACTAL), _ceil_div(m, FRACTAL), FRACTAL, FRACTAL)
    raise ShapeError(f"no storage rule from {origin} to {storage}")


def _as_nchw(shape, origin: Format):
    if origin == Format.NCHW or (origin == Format.ND and len(shape) == 4):
        return tuple(shape)
    if origin == Format.NHWC:
        n, h, w, c = shape
        return (n, c, h, w)
    raise ShapeError(f"cannot store a {origin} tensor of shape {tuple(shape)} as NCHW-derived")
