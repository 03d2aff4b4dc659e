"""Cases for data movement and shape ops: Concat, Split, Pad, Expand, Tile, DepthToSpace,
SpaceToDepth, Shape, Size, ConstantOfShape, Range.

Exact ops (no arithmetic): results must match PyTorch bit for bit, except Range's float
values (rtol 1e-6).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand


def _space_to_depth_torch(x, b):
    """ONNX SpaceToDepth orders channels block-major ((i*b + j)*C + c); pixel_unshuffle
    orders them channel-major (c*b*b + i*b + j): regroup."""
    n, c, h, w = x.shape
    u = F.pixel_unshuffle(x, b).reshape(n, c, b * b, h // b, w // b)
    return u.transpose(1, 2).reshape(n, c * b * b, h // b, w // b)


def _depth_to_space_dcr_torch(x, b):
    """The ONNX spec's DCR formula, spelled in torch."""
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


CONCAT = [
    OpCase(
        "Concat",
        lambda a, b: ops.concat([a, b], 1),
        {"a": rand(2, 3), "b": rand(2, 5, seed=1)},
        lambda a, b: torch.cat([a, b], 1),
    ),
    OpCase(
        "Concat",
        lambda a, b, c: ops.concat([a, b, c], 0),
        {
            "a": rand(1, 4, dtype="int32"),
            "b": rand(3, 4, dtype="int32"),
            "c": rand(2, 4, dtype="int32"),
        },
        lambda a, b, c: torch.cat([a, b, c], 0),
        id="three-int32",
    ),
    OpCase(
        "Concat",
        lambda a, b: ops.concat([a, b], -1),
        {"a": rand(2, 2, 1, dtype="bool"), "b": rand(2, 2, 3, dtype="bool", seed=2)},
        lambda a, b: torch.cat([a, b], -1),
        id="bool-negative-axis",
    ),
    OpCase(
        "Concat",
        lambda a: ops.concat([a], 0),
        {"a": rand(3, dtype="float16")},
        lambda a: torch.cat([a], 0),
        id="single-float16",
    ),
    OpCase(
        "Concat",
        lambda a, b: ops.concat([a, b], 1),
        {"a": rand(3, 4), "b": rand(3, 5, seed=1)},
        lambda a, b: torch.cat([a, b], 1),
        symbolic={"a": ("N", 4), "b": ("N", 5)},
        id="symbolic",
    ),
    OpCase(
        "Concat",
        lambda a, b: ops.concat([a, b], 0),
        {"a": rand(3, 4), "b": rand(3)},
        raises=mdsl.ShapeError,
        id="rank-mismatch",
    ),
    OpCase(
        "Concat",
        lambda a, b: ops.concat([a, b], 0),
        {"a": rand(3, 4), "b": rand(3, 5)},
        raises=mdsl.ShapeError,
        id="dim-mismatch",
    ),
    OpCase(
        "Concat",
        lambda a, b: ops.concat([a, b], 2),
        {"a": rand(3, 4), "b": rand(3, 4)},
        raises=mdsl.ShapeError,
        id="axis-out-of-range",
    ),
    OpCase(
        "Concat",
        lambda a, b: ops.concat([a, b], 0),
        {"a": rand(3), "b": rand(3, dtype="int32")},
        raises=mdsl.DTypeError,
        id="dtype-mismatch",
    ),
    OpCase(
        "Concat", lambda a: ops.concat([], 0), {"a": rand(3)}, raises=mdsl.GraphError, id="empty"
    ),
]

SPLIT = [
    OpCase(
        "Split",
        lambda a: ops.split(a, [2, 3, 1], axis=1),
        {"a": rand(4, 6)},
        lambda a: torch.split(a, [2, 3, 1], 1),
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, num_outputs=3),
        {"a": rand(9, 2, dtype="int64")},
        lambda a: torch.chunk(a, 3, 0),
        id="num-outputs-even",
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, num_outputs=3, axis=-1),
        {"a": rand(2, 7)},
        lambda a: torch.chunk(a, 3, -1),  # ONNX and torch both give 3, 3, 1
        id="num-outputs-uneven",
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, [4], axis=0),
        {"a": rand(4, dtype="bool")},
        lambda a: (a,),
        id="one-piece-bool",
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, [2, 4], axis=1),
        {"a": rand(3, 6)},
        lambda a: torch.split(a, [2, 4], 1),
        symbolic={"a": ("N", 6)},
        id="symbolic",
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, [2, 3], axis=1),
        {"a": rand(4, 6)},
        raises=mdsl.ShapeError,
        id="sizes-not-summing",
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, [3, 3], axis=0, num_outputs=2),
        {"a": rand(6)},
        raises=mdsl.ShapeError,
        id="sizes-and-count",
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, num_outputs=4),
        {"a": rand(3)},
        raises=mdsl.ShapeError,
        id="too-many-pieces",
    ),
    OpCase(
        "Split",
        lambda a: ops.split(a, [1, 1], axis=2),
        {"a": rand(2, 2)},
        raises=mdsl.ShapeError,
        id="axis-out-of-range",
    ),
]

X4 = rand(2, 3, 4, 5)
PAD = [
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [0, 0, 1, 2, 0, 0, 3, 1]),
        {"a": X4},
        lambda a: F.pad(
            a, (2, 1, 1, 3)
        ),  # torch lists the last axis first: (left, right, top, bottom)
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [1, 0, 0, 2], 1.5),
        {"a": rand(3, 4)},
        lambda a: F.pad(a, (0, 2, 1, 0), value=1.5),
        id="constant-value",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [0, 0, 2, 3, 0, 0, 1, 2], mode="reflect"),
        {"a": X4},
        lambda a: F.pad(a, (3, 2, 2, 1), mode="reflect"),
        id="reflect",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [0, 0, 3, 0, 0, 0, 0, 4], mode="edge"),
        {"a": X4},
        lambda a: F.pad(a, (0, 4, 3, 0), mode="replicate"),
        id="edge",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [0, 0, 1, 2, 0, 0, 2, 1], mode="wrap"),
        {"a": X4},
        lambda a: F.pad(a, (2, 1, 1, 2), mode="circular"),
        id="wrap",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [-1, 2, 0, -2]),
        {"a": rand(4, 5)},
        lambda a: F.pad(a, (2, -2, -1, 0)),
        id="negative-crops",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [2, 1], 7, axes=[-1]),
        {"a": rand(2, 3, dtype="int32", lo=-5, hi=5)},
        lambda a: F.pad(a, (2, 1), value=7),
        id="axes-int32",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [0, 0, 1, 1, 0, 0, 1, 1]),
        {"a": X4},
        lambda a: F.pad(a, (1, 1, 1, 1)),
        symbolic={"a": ("N", 3, "H", "W")},
        id="symbolic",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [1, 1, 1]),
        {"a": rand(3, 4)},
        raises=mdsl.ShapeError,
        id="pads-wrong-length",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [0, 4, 0, 0], mode="reflect"),
        {"a": rand(3, 4)},
        raises=mdsl.ShapeError,
        id="reflect-too-wide",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [1, 1], 0.5),
        {"a": rand(3, dtype="int32")},
        raises=mdsl.DTypeError,
        id="fractional-value-for-int",
    ),
    OpCase(
        "Pad",
        lambda a: ops.pad(a, [1, 1], mode="mirror"),
        {"a": rand(3)},
        raises=mdsl.GraphError,
        id="unknown-mode",
    ),
]

EXPAND = [
    OpCase("Expand", lambda a: ops.expand(a, [3, 4]), {"a": rand(3, 1)}, lambda a: a.expand(3, 4)),
    OpCase(
        "Expand",
        lambda a: ops.expand(a, [2, 3, 4]),
        {"a": rand(4, dtype="int64")},
        lambda a: a.expand(2, 3, 4),
        id="new-leading-axes",
    ),
    OpCase(
        "Expand",
        lambda a: ops.expand(a, [1, 5]),
        {"a": rand(3, 1, dtype="bool")},
        lambda a: torch.broadcast_to(a, (3, 5)),
        id="bidirectional-bool",
    ),
    OpCase(
        "Expand",
        lambda a: ops.expand(a, ["N", 4]),
        {"a": rand(3, 1)},
        lambda a: a.expand(3, 4),
        symbolic={"a": ("N", 1)},
        id="symbolic",
    ),
    OpCase(
        "Expand",
        lambda a: ops.expand(a, [4]),
        {"a": rand(3)},
        raises=mdsl.ShapeError,
        id="incompatible",
    ),
    OpCase(
        "Expand",
        lambda a: ops.expand(a, ["N", "N"]),
        {"a": rand(1, 3)},
        lambda a: a.expand(3, 3),
        symbolic={"a": (1, "N")},
        id="size-1-to-symbol",
    ),
]

TILE = [
    OpCase("Tile", lambda a: ops.tile(a, [2, 3]), {"a": rand(2, 3)}, lambda a: a.repeat(2, 3)),
    OpCase(
        "Tile",
        lambda a: ops.tile(a, [1, 3, 0]),
        {"a": rand(2, 1, 3, dtype="int8")},
        lambda a: a.repeat(1, 3, 0),
        id="zero-int8",
    ),
    OpCase(
        "Tile",
        lambda a: ops.tile(a, [2, 1]),
        {"a": rand(3, 2)},
        lambda a: torch.tile(a, (2, 1)),
        symbolic={"a": ("N", 2)},
        id="symbolic",
    ),
    OpCase(
        "Tile",
        lambda a: ops.tile(a, [2]),
        {"a": rand(2, 3)},
        raises=mdsl.ShapeError,
        id="wrong-length",
    ),
]

BLOCKS = [
    OpCase(
        "DepthToSpace",
        lambda a: ops.depth_to_space(a, blocksize=2, mode="CRD"),
        {"a": rand(2, 8, 3, 4)},
        lambda a: F.pixel_shuffle(a, 2),
        id="CRD",
    ),
    OpCase(
        "DepthToSpace",
        lambda a: ops.depth_to_space(a, blocksize=3),
        {"a": rand(1, 18, 2, 2, dtype="int32")},
        lambda a: _depth_to_space_dcr_torch(a, 3),
        id="DCR",
    ),
    OpCase(
        "DepthToSpace",
        lambda a: ops.depth_to_space(a, blocksize=2),
        {"a": rand(1, 6, 2, 2)},
        raises=mdsl.ShapeError,
        id="channels-indivisible",
    ),
    OpCase(
        "DepthToSpace",
        lambda a: ops.depth_to_space(a, blocksize=2),
        {"a": rand(8, 2, 2)},
        raises=mdsl.ShapeError,
        id="rank-3",
    ),
    OpCase(
        "SpaceToDepth",
        lambda a: ops.space_to_depth(a, blocksize=2),
        {"a": rand(2, 3, 4, 6)},
        lambda a: _space_to_depth_torch(a, 2),
    ),
    OpCase(
        "SpaceToDepth",
        lambda a: ops.depth_to_space(ops.space_to_depth(a, blocksize=3), blocksize=3),
        {"a": rand(1, 2, 6, 3)},
        lambda a: a,
        id="inverse-of-DCR",
    ),
    OpCase(
        "SpaceToDepth",
        lambda a: ops.space_to_depth(a, blocksize=2),
        {"a": rand(1, 3, 5, 4)},
        raises=mdsl.ShapeError,
        id="height-indivisible",
    ),
]


def _int64(values):
    return torch.tensor(values, dtype=torch.int64)


SHAPES = [
    OpCase("Shape", ops.shape, {"a": rand(2, 3, 4)}, lambda a: _int64(a.shape)),
    OpCase(
        "Shape",
        lambda a: ops.shape(a, start=1, end=-1),
        {"a": rand(2, 3, 4, 5, dtype="bool")},
        lambda a: _int64(a.shape[1:-1]),
        id="start-end",
    ),
    OpCase(
        "Shape",
        ops.shape,
        {"a": rand(5, 3, dtype="int32")},
        lambda a: _int64(a.shape),
        symbolic={"a": ("N", 3)},
        id="symbolic",
    ),
    OpCase("Size", ops.size, {"a": rand(2, 3, 4)}, lambda a: _int64(a.numel())),
    OpCase(
        "Size",
        ops.size,
        {"a": rand(6, 2, dtype="int8")},
        lambda a: _int64(a.numel()),
        symbolic={"a": ("N", 2)},
        id="symbolic",
    ),
    OpCase(
        "ConstantOfShape",
        lambda: ops.constant_of_shape((2, 3), 1.5),
        {},
        lambda: torch.full((2, 3), 1.5),
    ),
    OpCase(
        "ConstantOfShape",
        lambda: ops.constant_of_shape([4], 7),
        {},
        lambda: torch.full((4,), 7, dtype=torch.int64),
        id="int64",
    ),
    OpCase(
        "ConstantOfShape",
        lambda: ops.constant_of_shape([2, 0, 2], True),
        {},
        lambda: torch.ones((2, 0, 2), dtype=torch.bool),
        id="bool-empty",
    ),
    OpCase(
        "ConstantOfShape",
        lambda: ops.constant_of_shape([3], 2, dtype="float16"),
        {},
        lambda: torch.full((3,), 2, dtype=torch.float16),
        id="dtype",
    ),
    OpCase(
        "ConstantOfShape",
        lambda: ops.constant_of_shape([2, -1]),
        {},
        raises=mdsl.ShapeError,
        id="negative-dim",
    ),
    OpCase("Range", lambda: ops.range(0, 10, 3), {}, lambda: torch.arange(0, 10, 3)),
    OpCase(
        "Range",
        lambda: ops.range(0.5, 2.0, 0.25),
        {},
        lambda: torch.arange(0.5, 2.0, 0.25, dtype=torch.float32),
        id="float32",
    ),
    OpCase(
        "Range",
        lambda: ops.range(10, 0, -3, dtype="int32"),
        {},
        lambda: torch.arange(10, 0, -3, dtype=torch.int32),
        id="negative-delta-int32",
    ),
    OpCase(
        "Range",
        lambda: ops.range(5, 0),
        {},
        numpy_ref=lambda: np.arange(5, 0, dtype=np.int64),  # torch refuses this one
        id="empty",
    ),
    OpCase("Range", lambda: ops.range(0, 4, 0), {}, raises=mdsl.ShapeError, id="zero-delta"),
]

CASES = CONCAT + SPLIT + PAD + EXPAND + TILE + BLOCKS + SHAPES
