"""Cases for ValueDims (sizes read from values) and DynamicSlice (Slice with run-time
bounds, against numpy slicing)."""

from __future__ import annotations

import numpy as np

from mdsl import ops
from tests.ops.op_table import OpCase, rand


def _passthrough(v):
    """The ValueDims node's own output: its input, unchanged."""
    ops.value_dims(v)
    (node,) = [n for n in v.graph if n.op_type == "ValueDims"]
    return node.outputs[0]


def _filled(n):
    (length,) = ops.value_dims(n)
    return ops.constant_of_shape((length, 3), 2.0)


CASES = [
    OpCase("ValueDims", _passthrough, {"v": np.array([2, 0, 5], np.int64)}, lambda v: v,
           id="passthrough"),
    OpCase("ValueDims", _filled, {"n": np.array(4, np.int64)},
           lambda n: np.full((4, 3), 2.0, np.float32), id="sizes-a-fill"),
    OpCase("DynamicSlice", ops.dynamic_slice,
           {"x": rand(4, 5), "s": np.array([1, -3]), "e": np.array([9, -1])},
           lambda x, s, e: x[1:9, -3:-1], id="clamped-negative"),
    OpCase("DynamicSlice", lambda x, s, e: ops.dynamic_slice(x, s, e, axes=(1,), steps=(-1,)),
           {"x": rand(2, 6), "s": np.array([4]), "e": np.array([0])},
           lambda x, s, e: x[:, 1:5].flip(1), id="reversed"),
]  # fmt: skip
