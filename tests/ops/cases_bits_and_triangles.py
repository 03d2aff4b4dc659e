"""Cases for the bitwise ops, BitCast, inverse/hyperbolic trigonometry, CumProd,
EyeLike, ReverseSequence and Trilu, checked against PyTorch (bits and math) or plain
Python loops (shifts past the type's width, which torch leaves undefined)."""

from __future__ import annotations

import numpy as np
import torch

import mdsl
from mdsl import ops
from tests.ops.cases_activation import HALF_TOL, unary_cases
from tests.ops.op_table import OpCase, rand

A = rand(4, 5, dtype="int32", lo=-1000, hi=1000)
B = rand(5, dtype="int32", lo=-1000, hi=1000, seed=1)
U16 = rand(3, 4, dtype="uint16", lo=0, hi=65535)


def _shift_loop(x, y, direction):
    """BitShift element by element in Python ints, masked to x's width."""
    bits = x.dtype.itemsize * 8
    out = np.empty(np.broadcast_shapes(x.shape, y.shape), x.dtype)
    for i in np.ndindex(out.shape):
        a, s = int(np.broadcast_to(x, out.shape)[i]), int(np.broadcast_to(y, out.shape)[i])
        out[i] = 0 if s >= bits else ((a << s) if direction == "LEFT" else (a >> s)) % 2**bits
    return out


def _signed_shift_loop(x, y, direction):
    """BitShift of signed x in Python ints: a count outside [0, width) shifts everything
    out (left: 0; right: the sign, -1 or 0); the result wraps to x's width."""
    bits = x.dtype.itemsize * 8
    out = np.empty(np.broadcast_shapes(x.shape, y.shape), x.dtype)
    for i in np.ndindex(out.shape):
        a, s = int(np.broadcast_to(x, out.shape)[i]), int(np.broadcast_to(y, out.shape)[i])
        s = s if 0 <= s < bits else bits
        value = (a << s) if direction == "LEFT" else (a >> s)
        value %= 2**bits
        out[i] = value - 2**bits if value >= 2 ** (bits - 1) else value
    return out


def _signed_shift(direction, dtype, y):
    x = np.array([[-128, -7, -1, 0, 5, 127]] * 2, dtype) * (1 if dtype == "int8" else 1000)
    return OpCase(
        "BitShift",
        lambda x, y: ops.bit_shift(x, y, direction=direction),
        {"x": x, "y": np.array(y, dtype)},
        numpy_ref=lambda x, y: _signed_shift_loop(x, y, direction),
        id=f"{direction.lower()}-{dtype}",
    )


BITWISE = [
    OpCase("BitwiseAnd", ops.bitwise_and, {"a": A, "b": B}, torch.bitwise_and),
    OpCase("BitwiseOr", ops.bitwise_or, {"a": A, "b": B}, torch.bitwise_or),
    OpCase("BitwiseXor", ops.bitwise_xor, {"a": A, "b": B}, torch.bitwise_xor),
    OpCase("BitwiseNot", ops.bitwise_not, {"x": A}, torch.bitwise_not),
    OpCase(
        "BitwiseAnd",
        ops.bitwise_and,
        {"a": U16, "b": U16[::-1].copy()},
        numpy_ref=lambda a, b: np.array(
            [[int(p) & int(q) for p, q in zip(r, s)] for r, s in zip(a, b)], np.uint16
        ),
        id="uint16",
    ),
    OpCase(
        "BitwiseAnd",
        ops.bitwise_and,
        {"a": rand(3), "b": rand(3)},
        raises=mdsl.DTypeError,
        id="float",
    ),
    OpCase(
        "BitShift",
        lambda x, y: ops.bit_shift(x, y, direction="LEFT"),
        {"x": rand(6, dtype="uint8", lo=0, hi=255), "y": np.array([0, 1, 3, 7, 8, 9], np.uint8)},
        numpy_ref=lambda x, y: _shift_loop(x, y, "LEFT"),
        id="left-uint8",
    ),
    OpCase(
        "BitShift",
        lambda x, y: ops.bit_shift(x, y, direction="RIGHT"),
        {"x": rand(2, 3, dtype="uint32", lo=0, hi=2**31), "y": np.array([1, 31, 32], np.uint32)},
        numpy_ref=lambda x, y: _shift_loop(x, y, "RIGHT"),
        id="right-uint32",
    ),
    OpCase(
        "BitShift",
        lambda x, y: ops.bit_shift(x, y, direction="LEFT"),
        {"x": np.array([1, 3, 2**63 + 5], np.uint64), "y": np.array([63, 64, 1], np.uint64)},
        numpy_ref=lambda x, y: _shift_loop(x, y, "LEFT"),
        id="left-uint64-wide",
    ),
    _signed_shift("LEFT", "int8", [0, 1, 7, 8, -1, 3]),
    _signed_shift("RIGHT", "int8", [0, 1, 7, 8, -1, 3]),
    _signed_shift("LEFT", "int64", [0, 1, 63, 64, -1, 50]),
    _signed_shift("RIGHT", "int32", [0, 1, 31, 32, -1, 9]),
    OpCase(
        "BitwiseNot",
        ops.bitwise_not,
        {"x": np.array([0, 1, 254, 255], np.uint8)},
        numpy_ref=lambda x: np.array([255, 254, 1, 0], np.uint8),
        id="uint8",
    ),
    OpCase(
        "BitwiseXor",
        ops.bitwise_xor,
        {"a": np.array([-1, 2**62], np.int64), "b": np.array([2**40, -(2**62)], np.int64)},
        numpy_ref=lambda a, b: np.array([~(2**40), -(2**63)], np.int64),
        id="int64",
    ),
    OpCase(
        "BitShift",
        lambda x, y: ops.bit_shift(x, y, direction="UP"),
        {"x": rand(3, dtype="uint8"), "y": rand(3, dtype="uint8")},
        raises=mdsl.GraphError,
        id="bad-direction",
    ),
    OpCase(
        "BitCast",
        lambda x: ops.bit_cast(x, to=mdsl.int32),
        {"x": rand(2, 3)},
        lambda x: x.view(torch.int32),
    ),
    OpCase(
        "BitCast",
        lambda x: ops.bit_cast(x, to=mdsl.int64),
        {"x": rand(3)},
        raises=mdsl.DTypeError,
        id="wider",
    ),
]

POSITIVE = rand(3, 5, lo=1.0, hi=4)
UNIT = rand(3, 5, lo=-0.95, hi=0.95)
TRIG = [
    *unary_cases("Acos", ops.acos, torch.acos, x=UNIT),
    *unary_cases("Asin", ops.asin, torch.asin, x=UNIT),
    *unary_cases("Atan", ops.atan, torch.atan),
    *unary_cases("Acosh", ops.acosh, torch.acosh, x=POSITIVE),
    *unary_cases("Asinh", ops.asinh, torch.asinh),
    *unary_cases("Atanh", ops.atanh, torch.atanh, x=UNIT),
]

X = rand(3, 4, lo=0.5, hi=1.5)
MASKS = [
    OpCase("CumProd", lambda x: ops.cumprod(x, 1), {"x": X}, lambda x: torch.cumprod(x, 1)),
    OpCase(
        "CumProd",
        lambda x: ops.cumprod(x, 0, exclusive=True, reverse=True),
        {"x": rand(4, 2, dtype="int64", lo=-3, hi=3)},
        lambda x: torch.flip(
            torch.cumprod(torch.flip(torch.cat([x[1:], torch.ones_like(x[:1])]), [0]), 0), [0]
        ),
        id="exclusive-reverse-int64",
    ),
    OpCase(
        "CumProd",
        lambda x: ops.cumprod(x, 0),
        {"x": rand(3, dtype="float16")},
        lambda x: torch.cumprod(x.float(), 0).half(),
        id="f16",
        **HALF_TOL,
    ),
    OpCase(
        "EyeLike",
        lambda x: ops.eye_like(x, k=-1, dtype="float64"),
        {"x": rand(3, 4, dtype="int32")},
        lambda x: torch.tensor(
            [[float(j == i - 1) for j in range(4)] for i in range(3)], dtype=torch.float64
        ),
    ),
    OpCase("EyeLike", ops.eye_like, {"x": rand(2, 2, 2)}, raises=mdsl.ShapeError, id="3d"),
    OpCase(
        "ReverseSequence",
        lambda x, n: ops.reverse_sequence(x, n, batch_axis=1, time_axis=0),
        {"x": rand(4, 3, 2), "n": np.array([4, 1, 2], np.int64)},
        numpy_ref=lambda x, n: np.stack(
            [np.concatenate([x[:k, b][::-1], x[k:, b]]) for b, k in enumerate(n)], axis=1
        ),
    ),
    OpCase(
        "ReverseSequence",
        lambda x, n: ops.reverse_sequence(x, n, batch_axis=0, time_axis=1),
        {"x": rand(2, 3), "n": np.array([3, 2, 1], np.int64)},
        raises=mdsl.ShapeError,
        id="wrong-batch",
    ),
    OpCase("Trilu", ops.trilu, {"x": rand(2, 3, 5)}, torch.triu),
    OpCase(
        "Trilu",
        lambda x: ops.trilu(x, upper=False, k=1),
        {"x": rand(4, 3, dtype="int32")},
        lambda x: torch.tril(x, 1),
        id="lower-k1",
    ),
    OpCase(
        "Trilu",
        lambda x: ops.trilu(x, k=-2),
        {"x": rand(2, 2, 5, 4, dtype="float16")},
        lambda x: torch.triu(x, -2),
        id="4d-f16-k-2",
    ),
    OpCase(
        "Trilu",
        lambda x: ops.trilu(x, upper=False, k=-1),
        {"x": rand(3, 6, dtype="bool")},
        lambda x: torch.tril(x, -1),
        id="bool-lower",
    ),
    OpCase(
        "EyeLike",
        lambda x: ops.eye_like(x, k=2, dtype="bfloat16"),
        {"x": rand(4, 5)},
        numpy_ref=lambda x: np.eye(4, 5, 2).astype(mdsl.bfloat16.np),
        id="bf16-k2",
    ),
    OpCase(
        "EyeLike",
        lambda x: ops.eye_like(x, k=-1, dtype="bool"),
        {"x": rand(3, 3, dtype="int8")},
        numpy_ref=lambda x: np.eye(3, 3, -1, dtype=bool),
        id="bool",
    ),
    OpCase(
        "ReverseSequence",
        lambda x, n: ops.reverse_sequence(x, n, batch_axis=0, time_axis=1),
        {"x": rand(3, 4, 2, 2, dtype="int8", lo=-9, hi=9), "n": np.array([0, 4, 2], np.int64)},
        numpy_ref=lambda x, n: np.stack(
            [np.concatenate([x[b, :k][::-1], x[b, k:]]) for b, k in enumerate(n)]
        ),
        id="batch-first-int8",
    ),
    OpCase("Trilu", ops.trilu, {"x": rand(3)}, raises=mdsl.ShapeError, id="1d"),
]

COND = np.array([True, False, True, True])
FILTERS = [
    OpCase(
        "Compress",
        lambda x, c: ops.compress(x, c, axis=1),
        {"x": rand(2, 4), "c": COND},
        lambda x, c: x[:, c],
    ),
    OpCase(
        "Compress",
        lambda x, c: ops.compress(x, c),
        {"x": rand(2, 3, dtype="int32"), "c": COND[:3]},
        lambda x, c: x.reshape(-1)[:3][c],
        id="flat-short-condition",
    ),
    OpCase(
        "Unique",
        lambda x: ops.unique(x),
        {"x": np.array([4, 1, 4, 0, 1, 1], np.int64)},
        lambda x: (
            torch.unique(x),
            torch.tensor([3, 1, 0]),
            torch.unique(x, return_inverse=True)[1],
            torch.unique(x, return_counts=True)[1],
        ),
    ),
    OpCase(
        "Unique",
        lambda x: ops.unique(x, axis=0, sorted=False),
        {"x": np.array([[2, 0], [1, 1], [2, 0]], np.float32)},
        numpy_ref=lambda x: (
            np.array([[2, 0], [1, 1]], np.float32),
            np.array([0, 1]),
            np.array([0, 1, 0]),
            np.array([2, 1]),
        ),
        id="rows-first-occurrence",
    ),
]

CASES = [*BITWISE, *TRIG, *MASKS, *FILTERS]
