"""Cases aimed at the generated indexing kernels (`mdsl.codegen.lower_indexing`): loop
tails, sizes past the one-thread limit (the parallel loops), inner size 1, negative
indices, NaN and ties in selections, every Pad mode with crops, uneven Split and Tile.

The C backend's op-table test runs every case through generated code and compares it
with the interpreter; here each case is checked against PyTorch or plain numpy.
"""

from __future__ import annotations

import numpy as np
import torch

from mdsl import ops
from tests.ops.op_table import OpCase, rand


def _idx(values, dtype="int64"):
    return np.array(values, dtype=dtype)


def _rng_idx(shape, lo, hi, seed=0, dtype="int64"):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def _with_nan(a: np.ndarray, *where) -> np.ndarray:
    a = a.copy()
    for w in where:
        a[w] = np.nan
    return a


def _stable_topk(x, k, axis, largest):
    """Reference TopK: ties by ascending index, NaN the largest value."""
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    if largest:  # -NaN sorts last; NaN must come first
        nan_first = np.argsort(~np.isnan(np.take_along_axis(x, order, axis)), axis, kind="stable")
        order = np.take_along_axis(order, nan_first, axis)
    order = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, order, axis), order.astype(np.int64)


TABLE = rand(50, 700)  # 35,000 elements: gathers of all its rows run in parallel

CASES = [
    # -- Gather ------------------------------------------------------------------------------
    OpCase(
        "Gather",
        ops.gather,
        {"data": TABLE, "indices": _rng_idx((2, 60), -50, 50)},
        lambda d, i: d[torch.where(i < 0, i + 50, i)],
        id="kernel-rows-parallel-negative",
    ),
    OpCase(
        "Gather",
        lambda d, i: ops.gather(d, i, axis=2),
        {"data": rand(3, 4, 7, dtype="int64", lo=-100, hi=100), "indices": _idx([[6, -7, 3]])},
        lambda d, i: d[:, :, torch.where(i < 0, i + 7, i)],
        id="kernel-inner-one-int64",
    ),
    OpCase(
        "Gather",
        lambda d, i: ops.gather(d, i, axis=1),
        {"data": rand(2, 9, 3, dtype="float16"), "indices": _idx([8, 0, 8, 1], "int32")},
        lambda d, i: d[:, i.long()],
        id="kernel-float16-int32",
    ),
    # -- GatherElements / ScatterElements -----------------------------------------------------
    OpCase(
        "GatherElements",
        lambda d, i: ops.gather_elements(d, i, axis=1),
        {"data": rand(3, 8, 5), "indices": _rng_idx((2, 4, 5), -8, 8, seed=1)},
        numpy_ref=lambda d, i: np.take_along_axis(d[:2], np.where(i < 0, i + 8, i), axis=1),
        id="kernel-middle-axis-window",
    ),
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=0, reduction="max"),
        {
            "data": _with_nan(rand(6, 3), (1, 0)),
            "indices": _idx([[0, 5, 1], [-6, 5, 2], [3, -1, 1]]),
            "updates": _with_nan(rand(3, 3, seed=2), (0, 2)),
        },
        lambda d, i, u: d.scatter_reduce(0, torch.where(i < 0, i + 6, i), u, "amax"),
        id="kernel-max-nan-repeats",
    ),
    OpCase(
        "ScatterElements",
        lambda d, i, u: ops.scatter_elements(d, i, u, axis=1, reduction="mul"),
        {
            "data": rand(2, 5, dtype="int32", lo=-3, hi=3),
            "indices": _idx([[4, 4, 0], [1, -1, 2]]),
            "updates": rand(2, 3, dtype="int32", lo=-3, hi=3, seed=3),
        },
        lambda d, i, u: d.scatter_reduce(1, torch.where(i < 0, i + 5, i), u, "prod"),
        id="kernel-mul-int32",
    ),
    # -- CumSum --------------------------------------------------------------------------------
    OpCase(
        "CumSum",
        lambda x: ops.cumsum(x, 1, exclusive=True, reverse=True),
        {"x": rand(4, 9, 5, dtype="int32", lo=-50, hi=50)},
        numpy_ref=lambda x: np.flip(np.cumsum(np.flip(x, 1), 1) - np.flip(x, 1), 1).astype(
            np.int32
        ),
        id="kernel-exclusive-reverse-int32",
    ),
    OpCase(
        "CumSum",
        lambda x: ops.cumsum(x, 0),
        {"x": rand(300, 130)},
        lambda x: torch.cumsum(x.double(), 0).float(),
        id="kernel-axis0-parallel",
    ),
    OpCase(
        "CumProd",
        lambda x: ops.cumprod(x, 1, reverse=True),
        {"x": rand(3, 20, 4, dtype="int32", lo=-3, hi=3)},
        numpy_ref=lambda x: np.flip(np.cumprod(np.flip(x, 1), 1), 1).astype(np.int32),
        id="kernel-reverse-int32-wraps",
    ),
    OpCase(
        "CumProd",
        lambda x: ops.cumprod(x, 0, exclusive=True),
        {"x": rand(6, 5, lo=0.5, hi=1.5)},
        lambda x: torch.cat([torch.ones_like(x[:1]), torch.cumprod(x.double(), 0)[:-1]]).float(),
        id="kernel-exclusive-axis0",
    ),
    # -- TopK / ArgMax / ArgMin ----------------------------------------------------------------
    OpCase(
        "TopK",
        lambda x: ops.topk(x, 3, axis=1),
        {"x": _with_nan(np.round(rand(4, 7, 2)), (0, 3, 1), (2, 0, 0), (2, 5, 0))},
        numpy_ref=lambda x: _stable_topk(x, 3, 1, True),
        id="kernel-ties-nan-middle-axis",
    ),
    OpCase(
        "TopK",
        lambda x: ops.topk(x, 4, largest=False),
        {"x": rand(3, 11, dtype="int64", lo=-3, hi=3)},
        numpy_ref=lambda x: _stable_topk(x, 4, 1, False),
        id="kernel-smallest-int64-ties",
    ),
    OpCase(
        "ArgMax",
        lambda x: ops.argmax(x, axis=1, keepdims=False, select_last_index=True),
        {"x": _with_nan(np.round(rand(3, 6, 4)), (0, 1, 0), (0, 4, 0))},
        numpy_ref=lambda x: 5 - np.argmax(np.flip(x, 1), axis=1),
        id="kernel-last-nan-ties",
    ),
    OpCase(
        "ArgMin",
        lambda x: ops.argmin(x, axis=0),
        {"x": np.round(rand(5, 9))},
        numpy_ref=lambda x: np.argmin(x, axis=0)[None],
        id="kernel-first-ties",
    ),
    # -- Pad, Tile, Split -------------------------------------------------------------------------
    *(
        OpCase(
            "Pad",
            lambda x, m=mode: ops.pad(x, [1, -1, 2, 0, 2, -2], mode=m, constant_value=1.5),
            {"x": rand(2, 5, 6)},
            numpy_ref=lambda x, m=mode: np.pad(
                x[:, 1:, :4],
                [(1, 0), (0, 2), (2, 0)],
                mode=m,
                **({"constant_values": 1.5} if m == "constant" else {}),
            ),
            id=f"kernel-{mode}-crop",
        )
        for mode in ("constant", "reflect", "edge", "wrap")
    ),
    OpCase(
        "Pad",
        lambda x: ops.pad(x, [0, 3, 0, 3], mode="constant", constant_value=-2.0),
        {"x": rand(200, 170, dtype="int32", lo=-9, hi=9)},
        numpy_ref=lambda x: np.pad(x, [(0, 0), (3, 3)], constant_values=-2),
        id="kernel-parallel-int32",
    ),
    OpCase(
        "Tile",
        lambda x: ops.tile(x, [3, 1, 2]),
        {"x": rand(2, 3, 5, dtype="bool")},
        lambda x: x.tile(3, 1, 2),
        id="kernel-bool",
    ),
    OpCase(
        "Split",
        lambda x: ops.split(x, axis=2, num_outputs=3),
        {"x": rand(2, 3, 11)},
        lambda x: torch.split(x, 4, dim=2),
        id="kernel-uneven-last-axis",
    ),
]
