"""Cases for the reductions beyond cases_basic (ReduceProd, ReduceL1, ReduceL2,
ReduceLogSumExp, ReduceSumSquare), ArgMax/ArgMin, CumSum and TopK.

Tolerances: float32 sums rtol 1e-5 / atol 1e-5; float16 results rtol 1e-3 (one float16
rounding of a float64 reference against torch's float32 accumulation); int and index
results exact.
"""

from __future__ import annotations

import numpy as np
import torch

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

A = rand(3, 4, 5)
SUMS = {"rtol": 1e-5, "atol": 1e-5}
HALF = {"rtol": 1e-3, "atol": 1e-3}

REDUCTIONS = [
    OpCase(
        "ReduceProd",
        lambda a: ops.reduce_prod(a, axes=[1], keepdims=False),
        {"a": rand(3, 4, 5, lo=0.5, hi=1.5)},
        lambda a: torch.prod(a, 1),
        **SUMS,
    ),
    OpCase(
        "ReduceProd",
        ops.reduce_prod,
        {"a": rand(2, 3, dtype="int32", lo=-3, hi=3)},
        lambda a: torch.prod(a).reshape(1, 1).to(torch.int32),
        id="all-keepdims-int32",
    ),
    OpCase(
        "ReduceL1",
        lambda a: ops.reduce_l1(a, axes=[0, 2]),
        {"a": A},
        lambda a: torch.linalg.vector_norm(a, 1, dim=(0, 2), keepdim=True),
        **SUMS,
    ),
    OpCase(
        "ReduceL1",
        lambda a: ops.reduce_l1(a, axes=[-1], keepdims=False),
        {"a": rand(4, 6, dtype="int64", lo=-9, hi=9)},
        lambda a: a.abs().sum(-1),
        id="int64",
    ),
    OpCase(
        "ReduceL2",
        lambda a: ops.reduce_l2(a, axes=[-1], keepdims=False),
        {"a": A},
        lambda a: torch.linalg.vector_norm(a, 2, dim=-1),
        **SUMS,
    ),
    OpCase(
        "ReduceL2",
        ops.reduce_l2,
        {"a": rand(8, 16, dtype="float16")},
        lambda a: torch.linalg.vector_norm(a.float(), 2).reshape(1, 1).half(),
        id="all-float16",
        **HALF,
    ),
    OpCase(
        "ReduceLogSumExp",
        lambda a: ops.reduce_log_sum_exp(a, axes=[1], keepdims=False),
        {"a": A},
        lambda a: torch.logsumexp(a, 1),
        **SUMS,
    ),
    OpCase(
        "ReduceLogSumExp",
        lambda a: ops.reduce_log_sum_exp(a, axes=[0, 1]),
        {"a": rand(4, 3, lo=500, hi=900)},  # exp overflows float32 without the max shift
        lambda a: torch.logsumexp(a, (0, 1), keepdim=True),
        id="large-values",
        **SUMS,
    ),
    OpCase(
        "ReduceLogSumExp",
        lambda a: ops.reduce_log_sum_exp(a, axes=[-1]),
        {"a": rand(2, 64, dtype="float16", lo=-8, hi=8)},
        lambda a: torch.logsumexp(a.float(), -1, keepdim=True).half(),
        id="float16",
        **HALF,
    ),
    OpCase(
        "ReduceSumSquare",
        lambda a: ops.reduce_sum_square(a, axes=[2], keepdims=False),
        {"a": A},
        lambda a: (a * a).sum(2),
        **SUMS,
    ),
    OpCase(
        "ReduceSumSquare",
        lambda a: ops.reduce_sum_square(a, axes=[0]),
        {"a": rand(5, 3, dtype="int32", lo=-20, hi=20)},
        lambda a: (a * a).sum(0, keepdim=True).to(torch.int32),
        id="int32",
    ),
    OpCase(
        "ReduceSumSquare",
        lambda a: ops.reduce_sum_square(a, axes=[1], keepdims=False),
        {"a": rand(6, 4)},
        lambda a: (a * a).sum(1),
        symbolic={"a": ("N", 4)},
        id="symbolic",
        **SUMS,
    ),
    OpCase(
        "ReduceL2",
        ops.reduce_l2,
        {"a": rand(3, dtype="int32")},
        raises=mdsl.DTypeError,
        id="int-input",
    ),
    OpCase(
        "ReduceLogSumExp",
        lambda a: ops.reduce_log_sum_exp(a, axes=[2]),
        {"a": rand(3, 4)},
        raises=mdsl.ShapeError,
        id="axis-out-of-range",
    ),
    OpCase(
        "ReduceProd",
        lambda a: ops.reduce_prod(a, axes=[0, -2]),
        {"a": rand(3, 4)},
        raises=mdsl.ShapeError,
        id="repeated-axis",
    ),
]

TIES = rand(4, 6, dtype="int32", lo=0, hi=2)  # small range: every row has ties


def _last_index(a, axis, pick):
    """Index of the last extreme element along `axis`, row by row."""
    return np.apply_along_axis(lambda row: np.flatnonzero(row == pick(row))[-1], axis, a)


ARG = [
    OpCase(
        "ArgMax",
        lambda a: ops.argmax(a, axis=1, keepdims=False),
        {"a": A},
        lambda a: torch.argmax(a, 1),
    ),
    OpCase(
        "ArgMax",
        lambda a: ops.argmax(a, axis=-1),
        {"a": TIES},
        lambda a: torch.argmax(a, -1, keepdim=True),  # torch documents: the first maximum
        id="ties-first",
    ),
    OpCase(
        "ArgMax",
        lambda a: ops.argmax(a, axis=1, keepdims=False, select_last_index=True),
        {"a": TIES},
        numpy_ref=lambda a: _last_index(a, 1, np.max).astype(np.int64),
        id="ties-last",
    ),
    OpCase(
        "ArgMin",
        lambda a: ops.argmin(a, axis=0),
        {"a": rand(5, 3, dtype="float16")},
        lambda a: torch.argmin(a, 0, keepdim=True),
    ),
    OpCase(
        "ArgMin",
        lambda a: ops.argmin(a, axis=0, keepdims=False, select_last_index=True),
        {"a": TIES},
        numpy_ref=lambda a: _last_index(a, 0, np.min).astype(np.int64),
        id="ties-last",
    ),
    OpCase(
        "ArgMax",
        lambda a: ops.argmax(a, axis=2),
        {"a": rand(3, 4)},
        raises=mdsl.ShapeError,
        id="axis-out-of-range",
    ),
    OpCase(
        "ArgMin",
        ops.argmin,
        {"a": rand(3, dtype="bool")},
        raises=mdsl.DTypeError,
        id="bool",
    ),
]

CUMSUM = [
    OpCase("CumSum", lambda a: ops.cumsum(a, 1), {"a": A}, lambda a: torch.cumsum(a, 1), **SUMS),
    OpCase(
        "CumSum",
        lambda a: ops.cumsum(a, -1, exclusive=True),
        {"a": rand(3, 6, dtype="int32", lo=-9, hi=9)},
        lambda a: (torch.cumsum(a, -1) - a).to(torch.int32),
        id="exclusive-int32",
    ),
    OpCase(
        "CumSum",
        lambda a: ops.cumsum(a, 0, reverse=True),
        {"a": rand(5, 2)},
        lambda a: torch.flip(torch.cumsum(torch.flip(a, [0]), 0), [0]),
        id="reverse",
        **SUMS,
    ),
    OpCase(
        "CumSum",
        lambda a: ops.cumsum(a, 0, exclusive=True, reverse=True),
        {"a": rand(6, dtype="int64", lo=-9, hi=9)},
        lambda a: torch.flip(torch.cumsum(torch.flip(a, [0]), 0), [0]) - a,
        id="exclusive-reverse-int64",
    ),
    OpCase(
        "CumSum",
        lambda a: ops.cumsum(a, 1),
        {"a": rand(2, 7)},
        lambda a: torch.cumsum(a, 1),
        symbolic={"a": ("N", "T")},
        id="symbolic",
        **SUMS,
    ),
    OpCase(
        "CumSum", lambda a: ops.cumsum(a, 1), {"a": rand(4)}, raises=mdsl.ShapeError, id="bad-axis"
    ),
]


def _topk_numpy(a, k, largest):
    """Row by row: sort (value, index) pairs, ties by ascending index (ONNX)."""
    sign = -1 if largest else 1
    idx = np.array([sorted(range(len(r)), key=lambda j: (sign * int(r[j]), j))[:k] for r in a])
    return np.take_along_axis(a, idx, axis=1), idx.astype(np.int64)


TOPK = [
    OpCase("TopK", lambda a: ops.topk(a, 3), {"a": A}, lambda a: tuple(torch.topk(a, 3))),
    OpCase(
        "TopK",
        lambda a: ops.topk(a, 2, axis=0, largest=False),
        {"a": rand(5, 4)},
        lambda a: tuple(torch.topk(a, 2, dim=0, largest=False)),
        id="smallest-axis0",
    ),
    OpCase(
        "TopK",
        lambda a: ops.topk(a, 6),
        {"a": rand(3, 6, dtype="float16")},
        lambda a: tuple(torch.sort(a, -1, descending=True)),
        id="k-equals-dim-float16",
    ),
    OpCase(
        "TopK",
        lambda a: ops.topk(a, 4),
        {"a": TIES},
        numpy_ref=lambda a: _topk_numpy(a, 4, largest=True),
        id="ties-int32",
    ),
    OpCase(
        "TopK",
        lambda a: ops.topk(a, 3, largest=False),
        {"a": rand(4, 6, dtype="uint8", lo=0, hi=3)},
        numpy_ref=lambda a: _topk_numpy(a, 3, largest=False),
        id="ties-smallest-uint8",
    ),
    OpCase(
        "TopK",
        lambda a: ops.topk(a, 2),
        {"a": rand(5, 9)},
        lambda a: tuple(torch.topk(a, 2)),
        symbolic={"a": ("N", 9)},
        id="symbolic",
    ),
    OpCase(
        "TopK", lambda a: ops.topk(a, 7), {"a": rand(2, 6)}, raises=mdsl.ShapeError, id="k-too-big"
    ),
    OpCase(
        "TopK",
        lambda a: ops.topk(a, 1, axis=3),
        {"a": rand(2, 6)},
        raises=mdsl.ShapeError,
        id="bad-axis",
    ),
]

CASES = REDUCTIONS + ARG + CUMSUM + TOPK
