"""Tensors made from attributes alone: ConstantOfShape, Range and EyeLike (ONNX).

ONNX passes ConstantOfShape's shape and Range's start/limit/delta as tensor inputs; mdsl
holds them as attributes so shape inference at build time sees them (the ONNX importer
folds constant inputs into these attributes). They are therefore static: a tensor shaped
like a symbolic one is made by broadcasting against it instead.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check


@op_proto(
    "ConstantOfShape",
    inputs={},
    outputs={"output": "any"},
    attrs={"shape": Attr([int]), "value": Attr(np.ndarray, default=None)},
    category="opaque",
)
def _constant_of_shape(*, shape, value):
    """A tensor of `shape` filled with the one element of `value` (default float32 0),
    ONNX ConstantOfShape."""
    check(
        all(not isinstance(d, int) or d >= 0 for d in shape),
        f"shape {tuple(shape)} has a negative dim",
    )
    dtype = "float32" if value is None else DType.of(value.dtype)
    check(value is None or value.size == 1, "value must hold exactly one element")
    return TensorType(tuple(shape), dtype)


def constant_of_shape(shape, value=0.0, *, dtype=None, name: str | None = None) -> Tensor:
    """A tensor of static `shape` filled with `value` (ONNX ConstantOfShape). The dtype is
    `dtype`, else that of `value` (a Python float gives float32, an int int64).

    `shape` is an attribute, not ONNX's tensor input, so build-time shape inference sees it.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     mask = mdsl.ops.constant_of_shape((4, 4), True)
    ...     g.output(mask, "mask")
    >>> mask.shape, mask.dtype
    ((4, 4), mdsl.bool_)
    """
    return _constant_of_shape(shape=shape, value=_one_element(value, dtype), name=name)


def _one_element(value, dtype) -> np.ndarray:
    if dtype is not None:
        return np.array([value], dtype=DType.of(dtype).np)
    if isinstance(value, np.ndarray):
        return value.reshape(1)
    if isinstance(value, float):
        return np.array([value], dtype=np.float32)
    return np.array([value])  # ints give int64, bools bool


def _constant_of_shape_ref(*, shape, value):
    fill = np.zeros(1, np.float32) if value is None else value
    return np.full(tuple(shape), fill.reshape(()), dtype=fill.dtype)


@op_proto(
    "Range",
    inputs={},
    outputs={"output": "numeric"},
    attrs={
        "start": Attr(float),
        "limit": Attr(float),
        "delta": Attr(float, default=1.0),
        "dtype": Attr(DType, default=DType.int64),
    },
    category="opaque",
)
def _range(*, start, limit, delta, dtype):
    """start, start + delta, ... up to but excluding `limit` (ONNX Range): max(ceil((limit
    - start) / delta), 0) elements of `dtype`."""
    check(delta != 0, "Range delta must not be 0")
    check(dtype.is_float or dtype.is_int, f"Range makes numbers, not {dtype}")
    return TensorType((range_length(start, limit, delta),), dtype)


def range_length(start, limit, delta):
    """max(ceil((limit - start) / delta), 0); with a symbolic start or limit, delta must
    be an integer and the symbols' ranges must prove the length is not negative."""
    if not isinstance(start, Dim) and not isinstance(limit, Dim):
        return max(math.ceil((limit - start) / delta), 0)
    check(float(delta).is_integer(), f"a symbolic Range needs an integer delta, got {delta}")
    step = int(delta)
    bounds = [_as_int_bound(v) for v in (start, limit)]
    span = (bounds[1] - bounds[0]) if step > 0 else (bounds[0] - bounds[1])
    check(
        _never_negative(span),
        f"Range({start}, {limit}, {delta}): the symbols' ranges do not prove it is non-empty",
    )
    return (span + abs(step) - 1) // abs(step)


def _as_int_bound(v):
    if isinstance(v, Dim):
        return v
    check(float(v).is_integer(), f"a symbolic Range needs integer bounds, got {v}")
    return int(v)


def _never_negative(span) -> bool:
    """Whether `span` (an int, or bare symbol plus a constant) is >= 0 for every value
    its symbol's declared range allows."""
    if isinstance(span, int):
        return span >= 0
    constant = span.terms.get((), 0)
    rest = span - constant
    return isinstance(rest, Dim) and rest.name is not None and rest.min + constant >= 0


def range(start, limit, delta=1, *, dtype=None, name: str | None = None) -> Tensor:
    """A 1-D tensor start, start + delta, ... < limit (ONNX Range; numpy.arange). The
    dtype is `dtype`, else int64 when start, limit and delta are all ints, else float32.

    start, limit and delta are attributes, not ONNX's tensor inputs, so build-time shape
    inference sees them.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     pos = mdsl.ops.range(0, 16)
    ...     g.output(pos, "pos")
    >>> pos.shape, pos.dtype
    ((16,), mdsl.int64)
    """
    if dtype is None:
        all_ints = all(isinstance(v, (int, np.integer)) for v in (start, limit, delta))
        dtype = DType.int64 if all_ints else DType.float32
    return _range(start=start, limit=limit, delta=delta, dtype=DType.of(dtype), name=name)


def _range_ref(*, start, limit, delta, dtype):
    steps = np.arange(range_length(start, limit, delta), dtype=np.float64)
    return (start + steps * delta).astype(dtype.np)


@op_proto(
    "EyeLike",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"dtype": Attr(DType, default=None), "k": Attr(int, default=0)},
    category="opaque",
)
def _eye_like(x, *, dtype, k):
    """Ones on the k-th diagonal of a 2-D tensor shaped like `x`, zeros elsewhere, of
    `dtype` (default x's) (ONNX EyeLike)."""
    check(x.rank == 2, f"EyeLike needs a 2-D input, got rank {x.rank}")
    return TensorType(x.shape, dtype or x.dtype)


def eye_like(x, *, dtype=None, k: int = 0, name=None) -> Tensor:
    """A 2-D tensor shaped like `x` with ones on diagonal `k` (> 0 above the main one)
    and zeros elsewhere (ONNX EyeLike; numpy.eye).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.eye_like(g.input("x", (2, 3)), k=1, dtype="int32"), "y")
    >>> mdsl.interpret(g, {"x": np.zeros((2, 3), np.float32)})["y"]
    array([[0, 1, 0],
           [0, 0, 1]], dtype=int32)
    """
    return _eye_like(x, dtype=None if dtype is None else DType.of(dtype), k=k, name=name)


def _eye_like_ref(x, *, dtype, k):
    return np.eye(x.shape[0], x.shape[1], k, dtype=(dtype.np if dtype else x.dtype))


register_op_impl("ConstantOfShape", _constant_of_shape_ref)
register_op_impl("EyeLike", _eye_like_ref)
register_op_impl("Range", _range_ref)

# a compiled loop of its own (masks.c), so the C backend needs no callback
MASKS_C_SOURCE = (Path(__file__).with_name("masks.c")).read_text()
register_op_impl("EyeLike", backend="c", source=MASKS_C_SOURCE, symbol="masks_eye_like")
