"""Cases for the first ops: arithmetic, comparisons, MatMul, movement, reductions."""

from __future__ import annotations

import torch

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

A, B = rand(3, 4), rand(4, seed=1)
CASES = [
    OpCase("Add", lambda a, b: a + b, {"a": A, "b": B}, torch.add),
    OpCase("Sub", lambda a, b: a - b, {"a": A, "b": B}, torch.sub),
    OpCase("Mul", lambda a, b: a * b, {"a": A, "b": B}, torch.mul),
    OpCase("Div", lambda a, b: a / b, {"a": A, "b": rand(4, lo=0.5, hi=2)}, torch.div),
    OpCase(
        "Div",
        lambda a, b: a / b,
        {"a": rand(5, dtype="int32", lo=-9, hi=9), "b": rand(5, dtype="int32", lo=1, hi=4)},
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        id="int-trunc",
    ),
    OpCase("Pow", lambda a, b: a**b, {"a": rand(6, lo=0.1, hi=2), "b": rand(6, seed=2)}, torch.pow),
    OpCase("Neg", lambda a: -a, {"a": A}, torch.neg),
    OpCase("Abs", ops.abs, {"a": A}, torch.abs),
    OpCase("Exp", ops.exp, {"a": A}, torch.exp),
    OpCase("Log", ops.log, {"a": rand(7, lo=0.1, hi=3)}, torch.log),
    OpCase("Sqrt", ops.sqrt, {"a": rand(7, lo=0.1, hi=3)}, torch.sqrt),
    OpCase("Tanh", ops.tanh, {"a": A}, torch.tanh),
    OpCase("Relu", ops.relu, {"a": A}, torch.relu),
    OpCase("Less", lambda a, b: a < b, {"a": A, "b": B}, torch.lt),
    OpCase("LessOrEqual", lambda a, b: a <= b, {"a": A, "b": B}, torch.le),
    OpCase("Greater", lambda a, b: a > b, {"a": A, "b": B}, torch.gt),
    OpCase("GreaterOrEqual", lambda a, b: a >= b, {"a": A, "b": B}, torch.ge),
    OpCase(
        "Equal",
        ops.equal,
        {"a": rand(5, dtype="int32"), "b": rand(5, dtype="int32", seed=3)},
        torch.eq,
    ),
    OpCase(
        "Add",
        lambda a, b: a + b,
        {"a": A, "b": rand(5)},
        raises=mdsl.ShapeError,
        id="bad-broadcast",
    ),
    OpCase(
        "Add",
        lambda a, b: a + b,
        {"a": A, "b": B.astype("float16")},
        raises=mdsl.DTypeError,
        id="mixed-dtype",
    ),
    OpCase(
        "MatMul",
        lambda a, b: a @ b,
        {"a": rand(2, 3, 4), "b": rand(4, 5)},
        torch.matmul,
        rtol=1e-5,
        atol=1e-5,
    ),
    OpCase(
        "MatMul",
        lambda a, b: a @ b,
        {"a": rand(4), "b": rand(2, 4, 3)},
        torch.matmul,
        id="vec-batched",
        atol=1e-5,
    ),
    OpCase(
        "MatMul",
        lambda a, b: a @ b,
        {"a": rand(3, 4), "b": rand(5, 2)},
        raises=mdsl.ShapeError,
        id="bad-k",
    ),
    OpCase("Reshape", lambda a: a.reshape(2, -1), {"a": A}, lambda a: a.reshape(2, -1)),
    OpCase(
        "Reshape", lambda a: a.reshape(5, -1), {"a": A}, raises=mdsl.ShapeError, id="indivisible"
    ),
    OpCase(
        "Transpose",
        lambda a: a.transpose(2, 0, 1),
        {"a": rand(2, 3, 4)},
        lambda a: a.permute(2, 0, 1),
    ),
    OpCase("Transpose", lambda a: a.T, {"a": A}, lambda a: a.T, id="T"),
    OpCase(
        "Flatten",
        lambda a: ops.flatten(a, axis=2),
        {"a": rand(2, 3, 4, 5)},
        lambda a: a.reshape(6, 20),
    ),
    OpCase(
        "Squeeze", lambda a: ops.squeeze(a, axes=[1]), {"a": rand(3, 1, 4)}, lambda a: a.squeeze(1)
    ),
    OpCase(
        "Squeeze",
        lambda a: ops.squeeze(a, axes=[0]),
        {"a": rand(3, 1, 4)},
        raises=mdsl.ShapeError,
        id="not-one",
    ),
    OpCase(
        "Unsqueeze",
        lambda a: ops.unsqueeze(a, axes=[0, 3]),
        {"a": A},
        lambda a: a.unsqueeze(0).unsqueeze(3),
    ),
    OpCase("Slice", lambda a: a[1:, ::2], {"a": rand(4, 6)}, lambda a: a[1:, ::2]),
    OpCase(
        "Slice", lambda a: a[..., -1], {"a": rand(2, 3, 4)}, lambda a: a[..., -1], id="ellipsis-int"
    ),
    OpCase(
        "Cast",
        lambda a: a.astype("int32"),
        {"a": rand(5, lo=-3, hi=3)},
        lambda a: a.to(torch.int32),
    ),
    OpCase("Identity", ops.identity, {"a": A}, lambda a: a),
    OpCase("ReduceSum", lambda a: a.sum(axis=1), {"a": A}, lambda a: a.sum(1), atol=1e-5),
    OpCase(
        "ReduceMean",
        lambda a: a.mean(axis=(0, 1), keepdims=True),
        {"a": A},
        lambda a: a.mean((0, 1), keepdim=True),
    ),
    OpCase("ReduceMax", lambda a: a.max(axis=-1), {"a": A}, lambda a: a.amax(-1)),
    OpCase("ReduceMin", lambda a: a.min(), {"a": A}, lambda a: a.amin()),
    OpCase("ReduceSum", lambda a: a.sum(axis=2), {"a": A}, raises=mdsl.ShapeError, id="bad-axis"),
]
