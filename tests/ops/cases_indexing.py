"""Cases for indexing by integer tensors: Gather (also through `tensor[index_tensor]`),
GatherElements, ScatterElements, OneHot.

Exact ops: results must match PyTorch (or the plain numpy written here) exactly, apart
from ScatterElements' add/mul on floats (rtol 1e-6: the order of accumulation may differ).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand


def _idx(values, dtype="int64"):
    return np.array(values, dtype=dtype)


def _wrap(indices, size):
    return np.where(indices < 0, indices + size, indices)


GATHER = [
    OpCase(
        "Gather",
        ops.gather,
        {"data": rand(5, 4), "indices": _idx([[0, 4, 2], [1, 1, 3]])},
        lambda d, i: d[i],
    ),
    OpCase(
        "Gather",
        lambda d, i: ops.gather(d, i, axis=1),
        {"data": rand(2, 5, 3, dtype="int32"), "indices": _idx([-1, 0, -5, 2], "int32")},
        lambda d, i: d[:, i.long()],
        id="axis1-negative-int32",
    ),
    OpCase(
        "Gather",
        lambda d, i: ops.gather(d, i, axis=-1),
        {"data": rand(3, 6, dtype="bool"), "indices": _idx([5, 0])},
        lambda d, i: torch.index_select(d, -1, i),
        id="last-axis-bool",
    ),
    OpCase(
        "Gather",
        ops.gather,
        {"data": rand(4, 3), "indices": _idx(2)},
        lambda d, i: d[int(i)],
        id="scalar-index",
    ),
    OpCase(
        "Gather",
        ops.gather,
        {"data": rand(10, 8, dtype="float16"), "indices": _idx([[3, 9], [0, 3], [7, 7]])},
        lambda d, i: F.embedding(i, d),
        symbolic={"indices": ("B", "T")},
        id="embedding-symbolic",
    ),
    OpCase(
        "Gather",
        lambda d, i: d[i],
        {"data": rand(6, 2), "indices": _idx([[5, -6], [0, 1]])},
        lambda d, i: d[i],
        id="getitem",
    ),
    OpCase(
        "Gather",
        lambda d, i: d[1:, i, None],
        {"data": rand(4, 5, 3), "indices": _idx([4, 0, 0])},
        lambda d, i: d[1:, i, None],
        id="getitem-with-slices",
    ),
    OpCase(
        "Gather",
        lambda d, i: d[..., 2, i],
        {"data": rand(2, 3, 4), "indices": _idx([3, 1])},
        lambda d, i: d[..., 2, i],
        id="getitem-int-next-to-tensor",
    ),
    OpCase(
        "Gather",
        lambda d, i: ops.gather(d, i, axis=2),
        {"data": rand(4, 3), "indices": _idx([0])},
        raises=mdsl.ShapeError,
        id="axis-out-of-range",
    ),
    OpCase(
        "Gather",
        ops.gather,
        {"data": rand(4, 3), "indices": rand(2)},
        raises=mdsl.DTypeError,
        id="float-indices",
    ),
    OpCase(
        "Gather",
        lambda d, i: d[i, :, 0],
        {"data": rand(4, 3, 2), "indices": _idx([0])},
        raises=mdsl.GraphError,
        id="getitem-int-apart-from-tensor",
    ),
    OpCase(
        "Gather",
        lambda d, i: d[i, i],
        {"data": rand(4, 4), "indices": _idx([0])},
        raises=mdsl.GraphError,
        id="getitem-two-tensors",
    ),
]

GATHER_ELEMENTS = [
    OpCase(
        "GatherElements",
        lambda d, i: ops.gather_elements(d, i, axis=1),
        {"data": rand(3, 4), "indices": _idx([[0, 3], [2, 2], [1, 0]])},
        lambda d, i: torch.gather(d, 1, i),
    ),
    OpCase(
        "GatherElements",
        ops.gather_elements,
        {"data": rand(4, 5, dtype="int32"), "indices": _idx([[3, 0, 1], [2, 2, 0]], "int32")},
        lambda d, i: torch.gather(d, 0, i.long()),  # indices smaller than the data on axis 1
        id="axis0-smaller-int32",
    ),
    OpCase(
        "GatherElements",
        lambda d, i: ops.gather_elements(d, i, axis=-1),
        {"data": rand(2, 4), "indices": _idx([[-1, 0, -4], [3, -2, 1]])},
        numpy_ref=lambda d, i: np.take_along_axis(d[:, :4], _wrap(i, 4), axis=1),
        id="negative",
    ),
    OpCase(
        "GatherElements",
        ops.gather_elements,
        {"data": rand(3, 4), "indices": _idx([0, 1])},
        raises=mdsl.ShapeError,
        id="rank-mismatch",
    ),
    OpCase(
        "GatherElements",
        lambda d, i: ops.gather_elements(d, i, axis=1),
        {"data": rand(3, 4), "indices": _idx([[0]] * 4)},
        raises=mdsl.ShapeError,
        id="indices-larger-than-data",
    ),
]

SCATTER_DATA = rand(3, 5)
UNIQUE = _idx([[4, 0], [1, 3], [2, -2]])  # distinct positions per row (-2 is 3)
REPEATED = _idx([[1, 1, 4], [0, 0, 0], [3, 2, 3]])


def _scatter_reduce(reduce):
    return lambda d, i, u: d.scatter_reduce(1, i, u, reduce, include_self=True)


SCATTER = [
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=1),
        {"data": SCATTER_DATA, "indices": _wrap(UNIQUE, 5), "updates": rand(3, 2, seed=1)},
        lambda d, i, u: d.scatter(1, i, u),
    ),
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=1),
        {"data": SCATTER_DATA, "indices": UNIQUE, "updates": rand(3, 2, seed=1)},
        lambda d, i, u: d.scatter(1, torch.where(i < 0, i + 5, i), u),
        id="negative",
    ),
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=0),
        {
            "data": rand(4, 2, dtype="int32"),
            "indices": _idx([[3, 0]]),
            "updates": rand(1, 2, dtype="int32", seed=4),
        },
        lambda d, i, u: d.scatter(0, i, u),
        id="axis0-int32",
    ),
    *[
        OpCase(
            "ScatterElements",
            lambda d, i, u, r=ours: ops.scatter_elements(d, i, u, axis=1, reduction=r),
            {"data": SCATTER_DATA, "indices": REPEATED, "updates": rand(3, 3, seed=2)},
            _scatter_reduce(theirs),
            rtol=1e-6,
            id=f"{ours}-repeated",
        )
        for ours, theirs in [("add", "sum"), ("mul", "prod"), ("max", "amax"), ("min", "amin")]
    ],
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=1, reduction="add"),
        {
            "data": rand(3, 5, dtype="int64"),
            "indices": REPEATED,
            "updates": rand(3, 3, dtype="int64"),
        },
        _scatter_reduce("sum"),
        id="add-int64",
    ),
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=1),
        {"data": SCATTER_DATA, "indices": REPEATED, "updates": rand(3, 2)},
        raises=mdsl.ShapeError,
        id="updates-shape",
    ),
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=1),
        {"data": SCATTER_DATA, "indices": REPEATED, "updates": rand(3, 3, dtype="float16")},
        raises=mdsl.DTypeError,
        id="updates-dtype",
    ),
]


def _one_hot_numpy(indices, depth, off, on, axis):
    wrapped = _wrap(indices.astype(np.int64), depth)
    rows = np.eye(depth + 1)[np.where((wrapped >= 0) & (wrapped < depth), wrapped, depth)]
    hot = np.moveaxis(rows[..., :depth], -1, axis)
    return np.where(hot == 1, on, off)


ONE_HOT = [
    OpCase(
        "OneHot",
        lambda i: ops.one_hot(i, 5),
        {"indices": _idx([[0, 4], [2, 2], [1, 3]])},
        lambda i: F.one_hot(i, 5).float(),
    ),
    OpCase(
        "OneHot",
        lambda i: ops.one_hot(i, 4, axis=0),
        {"indices": _idx([1, -1, 3, -4], "int32")},
        numpy_ref=lambda i: _one_hot_numpy(i, 4, 0.0, 1.0, 0).astype(np.float32),
        id="axis0-negative",
    ),
    OpCase(
        "OneHot",
        lambda i: ops.one_hot(i, 3, np.array([-1, 7], np.int64), axis=1),
        {"indices": _idx([[0, 5], [2, -9]])},
        numpy_ref=lambda i: _one_hot_numpy(i, 3, -1, 7, 1),
        id="out-of-range-int64-values",
    ),
    OpCase(
        "OneHot",
        lambda i: ops.one_hot(i, 6, np.array([0.5, 2.0], np.float32), axis=1),
        {"indices": _idx([[1, 5, -2], [0, 9, 3]])},
        numpy_ref=lambda i: _one_hot_numpy(i, 6, 0.5, 2.0, 1).astype(np.float32),
        symbolic={"indices": ("N", 3)},
        id="symbolic-batch-middle-axis",
    ),
    OpCase(
        "OneHot",
        lambda i: ops.one_hot(i, 3, np.array([0.0, 1.0, 2.0], np.float32)),
        {"indices": _idx([0])},
        raises=mdsl.ShapeError,
        id="three-values",
    ),
]

CASES = GATHER + GATHER_ELEMENTS + SCATTER + ONE_HOT
