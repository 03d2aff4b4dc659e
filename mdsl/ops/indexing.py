"""Indexing by integer tensors: Gather, GatherElements, ScatterElements, OneHot.

Index values are data, not attributes: they are tensor inputs, as in ONNX. Negative
indices count from the end of the indexed axis; out-of-range indices fail when the graph
runs, with an ExecutionError naming the op and the offending index. OneHot's `depth` is
an attribute (a tensor input in ONNX) so shape inference at build time sees it.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import ExecutionError
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.family import same_dtype
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axis

INDEX_DTYPES = ["int32", "int64"]


@op_proto(
    "Gather",
    inputs={"data": "any", "indices": INDEX_DTYPES},
    outputs={"output": "any"},
    attrs={"axis": Attr(int, default=0)},
    category="data_movement",
)
def gather(data, indices, *, axis):
    """Pick slices of `data` along `axis` at `indices` (ONNX Gather, numpy.take): the
    output shape is data.shape[:axis] + indices.shape + data.shape[axis+1:].

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     table = g.input("table", (1000, 64))
    ...     ids = g.input("ids", ("B", "T"), "int64")
    ...     y = mdsl.ops.gather(table, ids)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('B'), Dim('T'), 64)
    """
    check(data.rank >= 1, "Gather needs data of rank >= 1")
    axis = normalize_axis(axis, data.rank)
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    return TensorType(shape, data.dtype)


def _checked_indices(indices: np.ndarray, size: int, op_type: str, axis: int) -> np.ndarray:
    """`indices` as int64 with negatives wrapped; ExecutionError if any is out of range."""
    idx = indices.astype(np.int64)
    bad = (idx < -size) | (idx >= size)
    if bad.any():
        raise ExecutionError(
            f"{op_type} index {int(idx[bad].flat[0])} is out of range for axis {axis} "
            f"of size {size}"
        )
    return np.where(idx < 0, idx + size, idx)


def _gather_ref(data, indices, *, axis):
    axis %= data.ndim
    return np.take(data, _checked_indices(indices, data.shape[axis], "Gather", axis), axis=axis)


@op_proto(
    "GatherElements",
    inputs={"data": "any", "indices": INDEX_DTYPES},
    outputs={"output": "any"},
    attrs={"axis": Attr(int, default=0)},
    category="data_movement",
)
def gather_elements(data, indices, *, axis):
    """Pick one element of `data` per index (ONNX GatherElements, torch.gather): for
    axis 0, out[i][j] = data[indices[i][j]][j]. The output has the shape of `indices`.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     scores = g.input("scores", ("N", 10))
    ...     y = mdsl.ops.gather_elements(scores, g.input("k", ("N", 1), "int64"), axis=1)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 1)
    """
    _check_elementwise_indices("GatherElements", data, indices)
    normalize_axis(axis, data.rank)
    return TensorType(indices.shape, data.dtype)


def _check_elementwise_indices(op_type: str, data, indices) -> None:
    check(
        indices.rank == data.rank,
        f"{op_type} needs indices of the data's rank {data.rank}, got rank {indices.rank}",
    )
    for a, (di, dd) in enumerate(zip(indices.shape, data.shape)):
        if isinstance(di, int) and isinstance(dd, int):
            check(di <= dd, f"{op_type} indices dim {a} ({di}) is larger than the data's ({dd})")


def _gather_elements_ref(data, indices, *, axis):
    axis %= data.ndim
    idx = _checked_indices(indices, data.shape[axis], "GatherElements", axis)
    window = tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(indices.shape))
    return np.take_along_axis(data[window], idx, axis=axis)


SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


@op_proto(
    "ScatterElements",
    inputs={"data": "any", "indices": INDEX_DTYPES, "updates": "any"},
    outputs={"output": "any"},
    attrs={
        "axis": Attr(int, default=0),
        "reduction": Attr(str, default="none", choices=SCATTER_REDUCTIONS),
    },
    category="data_movement",
)
def scatter_elements(data, indices, updates, *, axis, reduction):
    """A copy of `data` with `updates` written at `indices` along `axis` (ONNX
    ScatterElements, torch.scatter / scatter_reduce); `reduction` combines an update with
    the value already there ("none" overwrites; with repeated indices the last one wins).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 10))
    ...     idx = g.input("idx", ("N", 2), "int64")
    ...     y = mdsl.ops.scatter_elements(x, idx, g.input("u", ("N", 2)), axis=1)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 10)
    """
    same_dtype("ScatterElements", data, updates)
    _check_elementwise_indices("ScatterElements", data, indices)
    check(
        updates.shape == indices.shape,
        f"updates shape {updates.describe()} must equal indices shape {indices.describe()}",
    )
    normalize_axis(axis, data.rank)
    check(
        reduction in ("none", "max", "min") or data.dtype != DType.bool_,
        f"reduction {reduction!r} is not defined for bool data",
    )
    return TensorType(data.shape, data.dtype, data.format)


_SCATTER_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_elements_ref(data, indices, updates, *, axis, reduction):
    axis %= data.ndim
    idx = _checked_indices(indices, data.shape[axis], "ScatterElements", axis)
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = idx
    out = data.copy()
    if reduction == "none":
        out[tuple(where)] = updates
    else:
        _SCATTER_UFUNCS[reduction].at(out, tuple(where), updates)
    return out


@op_proto(
    "OneHot",
    inputs={"indices": "numeric", "values": "any"},
    outputs={"output": "any"},
    attrs={"depth": Attr(int), "axis": Attr(int, default=-1)},
    category="opaque",
)
def _one_hot(indices, values, *, depth, axis):
    """values[1] where the index matches the position on the new `axis` of size `depth`,
    values[0] elsewhere (ONNX OneHot; negative indices count from depth, out-of-range ones
    give an all-off row)."""
    check(
        values.shape == (2,), f"values must hold (off, on), a 1-D tensor of 2, got {values.shape}"
    )
    check(not isinstance(depth, int) or depth >= 1, f"depth must be >= 1, got {depth}")
    axis = normalize_axis(axis, indices.rank + 1)
    shape = (*indices.shape[:axis], depth, *indices.shape[axis:])
    return TensorType(shape, values.dtype)


def one_hot(indices, depth: int, values=None, *, axis: int = -1, name: str | None = None) -> Tensor:
    """One-hot encode `indices` into a new axis of size `depth` (ONNX OneHot). `values`
    is (off, on) and sets the output dtype; by default float32 (0, 1).

    `depth` is an attribute, not ONNX's tensor input, so build-time shape inference sees it.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.one_hot(g.input("labels", ("N",), "int64"), 10)
    ...     g.output(y, "y")
    >>> y.shape, y.dtype
    ((Dim('N'), 10), mdsl.float32)
    """
    if values is None:
        values = np.array([0, 1], dtype=np.float32)
    return _one_hot(indices, values, depth=depth, axis=axis, name=name)


def _one_hot_ref(indices, values, *, depth, axis):
    axis %= indices.ndim + 1
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    positions = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(idx, axis) == positions
    return np.where(hot, values[1], values[0]).astype(values.dtype)


register_op_impl("Gather", _gather_ref)
register_op_impl("GatherElements", _gather_elements_ref)
register_op_impl("ScatterElements", _scatter_elements_ref)
register_op_impl("OneHot", _one_hot_ref)
