"""Cases for ValueDims (sizes read from values), DynamicSlice (Slice with run-time
bounds), DynamicReshape and DynamicCrop (Reshape's shape and Pad's negative pads read at
run time), against torch."""

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
    OpCase("DynamicReshape", ops.dynamic_reshape,
           {"x": rand(2, 3, 4), "s": np.array([0, -1, 2])},
           lambda x, s: x.reshape(2, 6, 2), id="copy-and-infer"),
    OpCase("DynamicReshape", lambda x, s: ops.dynamic_reshape(x, s, allowzero=True),
           {"x": rand(0, 3), "s": np.array([0, 0])},
           lambda x, s: x.reshape(0, 0), id="allowzero"),
    OpCase("DynamicSliceAxes", ops.dynamic_slice_axes,
           {"x": rand(3, 5), "s": np.array([4, 1]), "e": np.array([0, 9]),
            "a": np.array([-1, 0]), "t": np.array([-2, 1])},
           lambda x, s, e, a, t: x[1:, 1:5].flip(1)[:, ::2], id="run-time-axes-steps"),
    OpCase("DynamicCrop", ops.dynamic_crop,
           {"x": rand(4, 5), "c": np.array([1, 0, 2, 3])},
           lambda x, c: x[1:2, 0:2], id="crop"),
]  # fmt: skip
