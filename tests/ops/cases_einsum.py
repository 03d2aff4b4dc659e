"""Cases for Einsum against torch.einsum (float32: rtol/atol 1e-5; int32 exact)."""

from __future__ import annotations

import numpy as np
import torch

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

SUMS = {"rtol": 1e-5, "atol": 1e-5}


def _einsum_case(equation, shapes, case_id, dtype="float32", **extra):
    names = "abcd"[: len(shapes)]
    return OpCase(
        "Einsum",
        lambda *xs: ops.einsum(equation, *xs),
        {n: rand(*s, dtype=dtype, seed=i) for i, (n, s) in enumerate(zip(names, shapes))},
        lambda *xs: torch.einsum(equation, *xs),
        id=case_id,
        **({} if dtype.startswith("int") else SUMS),
        **extra,
    )


CASES = [
    _einsum_case("ij,jk->ik", [(3, 4), (4, 5)], "matmul"),
    _einsum_case("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], "batched-matmul"),
    _einsum_case("btd,bsd->bts", [(2, 3, 8), (2, 5, 8)], "attention-scores"),
    _einsum_case("ij,jk", [(3, 4), (4, 2)], "implicit-output"),
    _einsum_case("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], "ellipsis-broadcast"),
    _einsum_case("i,j->ij", [(3,), (4,)], "outer"),
    _einsum_case("ij->ji", [(3, 4)], "transpose"),
    _einsum_case("ii->i", [(4, 4)], "diagonal"),
    _einsum_case("ij->", [(3, 4)], "sum-all"),
    _einsum_case("ij,jk->ik", [(3, 4), (4, 5)], "int32", dtype="int32"),
    _einsum_case(
        "bij,bjk->bik",
        [(2, 3, 4), (2, 4, 5)],
        "symbolic",
        symbolic={"a": ("B", 3, 4), "b": ("B", 4, 5)},
    ),
    OpCase(
        "Einsum",
        lambda a, b: ops.einsum("ij,jk->ik", a, b),
        {"a": rand(2, 3), "b": rand(4, 5)},
        raises=mdsl.ShapeError,
        id="label-dim-mismatch",
    ),
    OpCase(
        "Einsum",
        lambda a: ops.einsum("ij,jk->ik", a),
        {"a": rand(2, 3)},
        raises=mdsl.ShapeError,
        id="operand-count",
    ),
    OpCase(
        "Einsum",
        lambda a: ops.einsum("ij->k", a),
        {"a": rand(2, 3)},
        raises=mdsl.ShapeError,
        id="unknown-output-label",
    ),
    OpCase(
        "Einsum",
        lambda a: ops.einsum("i1->i", a),
        {"a": rand(2, 3)},
        raises=mdsl.ShapeError,
        id="bad-label",
    ),
    OpCase(
        "Einsum",
        lambda a: ops.einsum("ijk->i", a),
        {"a": rand(2, 3)},
        raises=mdsl.ShapeError,
        id="rank-mismatch",
    ),
    OpCase(
        "Einsum",
        lambda a, b: ops.einsum("ij,jk->ik", a, b),
        {"a": rand(2, 3), "b": rand(3, 2).astype(np.float64)},
        raises=mdsl.DTypeError,
        id="dtype-mismatch",
    ),
]
