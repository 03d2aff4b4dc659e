"""Indexing by tuples of indices: GatherND and ScatterND (ONNX semantics).

The last axis of `indices` holds k coordinates into the first k axes of `data` (after
`batch_dims` leading axes both share); each tuple picks (GatherND) or replaces
(ScatterND) the slice `data[b..., i0, ..., ik-1, ...]`. Negative coordinates count
from the end; out-of-range ones fail at run time with an ExecutionError. ScatterND's
`reduction` combines an update with the value already there (add, mul, max, min)
instead of replacing it.

The compiled C backend runs both as C loops (`indexing_nd.c`, "c" bindings) that copy
whole slices.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdsl.ir.errors import ExecutionError
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import unify_dims

INDEX_DTYPES = ["int32", "int64"]
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _tuple_size(data, indices, batch_dims: int, op_type: str):
    check(indices.rank >= 1, f"{op_type} indices must have rank >= 1")
    check(
        0 <= batch_dims < min(data.rank, indices.rank),
        f"{op_type} batch_dims {batch_dims} out of range",
    )
    for axis in range(batch_dims):
        unify_dims(data.shape[axis], indices.shape[axis], f"{op_type} batch dim {axis}")
    k = indices.shape[-1]
    check(isinstance(k, int), f"{op_type} needs a static last dim of indices, got {k}")
    check(
        1 <= k <= data.rank - batch_dims,
        f"{op_type} indices.shape[-1] = {k} exceeds the rank {data.rank} of data less batch_dims {batch_dims}",
    )
    return k


@op_proto(
    "GatherND",
    inputs={"data": "any", "indices": INDEX_DTYPES},
    outputs={"output": "any"},
    attrs={"batch_dims": Attr(int, default=0)},
    category="data_movement",
)
def gather_nd(data, indices, *, batch_dims):
    """The slices of `data` at the coordinate tuples in `indices`' last axis (ONNX
    GatherND): output shape indices.shape[:-1] + data.shape[batch_dims + k:].

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.gather_nd(g.input("x", (2, 3)), g.input("i", (2, 2), "int64"))
    ...     g.output(y, "y")
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> mdsl.interpret(g, {"x": x, "i": np.array([[0, 2], [1, 0]])})["y"]
    array([2., 3.], dtype=float32)
    """
    k = _tuple_size(data, indices, batch_dims, "GatherND")
    return TensorType(tuple(indices.shape[:-1]) + tuple(data.shape[batch_dims + k :]), data.dtype)


@op_proto(
    "ScatterND",
    inputs={"data": "any", "indices": INDEX_DTYPES, "updates": "any"},
    outputs={"output": "any"},
    attrs={"reduction": Attr(str, default="none", choices=REDUCTIONS)},
    category="data_movement",
)
def scatter_nd(data, indices, updates, *, reduction):
    """A copy of `data` with the slices at `indices`' coordinate tuples replaced by (or,
    with `reduction`, combined with) `updates` (ONNX ScatterND); updates has shape
    indices.shape[:-1] + data.shape[k:].

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x, u = g.input("x", (4,)), g.input("u", (2,))
    ...     g.output(mdsl.ops.scatter_nd(x, g.input("i", (2, 1), "int64"), u, reduction="add"), "y")
    >>> mdsl.interpret(g, {"x": np.ones(4, np.float32), "i": np.array([[1], [1]]),
    ...                    "u": np.array([5, 7], np.float32)})["y"]
    array([ 1., 13.,  1.,  1.], dtype=float32)
    """
    k = _tuple_size(data, indices, 0, "ScatterND")
    check(updates.dtype == data.dtype, f"ScatterND updates are {updates.dtype}, data {data.dtype}")
    want = tuple(indices.shape[:-1]) + tuple(data.shape[k:])
    check(
        updates.rank == len(want), f"ScatterND updates must have shape {want}, got {updates.shape}"
    )
    for axis, (got, expected) in enumerate(zip(updates.shape, want)):
        unify_dims(got, expected, f"ScatterND updates dim {axis}")
    return TensorType(data.shape, data.dtype)


# -- references ------------------------------------------------------------------------------
def _coordinates(indices: np.ndarray, sizes: tuple, op_type: str) -> np.ndarray:
    """indices as int64 [..., k], negatives wrapped; ExecutionError if one is out of range."""
    idx = indices.astype(np.int64)
    bound = np.array(sizes, dtype=np.int64)
    bad = (idx < -bound) | (idx >= bound)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        axis = where[-1]
        raise ExecutionError(
            f"{op_type} index {int(idx[where])} is out of range for axis {axis} of size "
            f"{sizes[axis]} (at indices{list(where)})"
        )
    return np.where(idx < 0, idx + bound, idx)


def _gather_nd_ref(data, indices, *, batch_dims):
    k = indices.shape[-1]
    batch = data.shape[:batch_dims]
    coords = _coordinates(indices, data.shape[batch_dims : batch_dims + k], "GatherND")
    n_batch = int(np.prod(batch, dtype=np.int64))
    flat_data = data.reshape((n_batch, *data.shape[batch_dims:]))
    flat_idx = coords.reshape((n_batch, -1, k))
    rows = [flat_data[b][tuple(flat_idx[b].T)] for b in range(n_batch)]
    out = (
        np.stack(rows)
        if rows
        else np.empty((0, flat_idx.shape[1], *data.shape[batch_dims + k :]), data.dtype)
    )
    return np.ascontiguousarray(out.reshape(indices.shape[:-1] + data.shape[batch_dims + k :]))


_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_nd_ref(data, indices, updates, *, reduction):
    k = indices.shape[-1]
    coords = _coordinates(indices, data.shape[:k], "ScatterND").reshape(-1, k)
    out = data.copy()
    slices = updates.reshape((coords.shape[0], *data.shape[k:]))
    for position, value in zip(coords, slices):  # in order: later duplicates win
        at = tuple(position)
        out[at] = value if reduction == "none" else _COMBINE[reduction](out[at], value)
    return out


register_op_impl("GatherND", _gather_nd_ref)
register_op_impl("ScatterND", _scatter_nd_ref)

C_SOURCE = Path(__file__).with_name("indexing_nd.c").read_text()
register_op_impl("GatherND", backend="c", source=C_SOURCE, symbol="indexing_gather_nd")
register_op_impl("ScatterND", backend="c", source=C_SOURCE, symbol="indexing_scatter_nd")
