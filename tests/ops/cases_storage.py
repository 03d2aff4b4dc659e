"""Cases for TransData (storage layout conversion): round trips through every storage
format come back bit for bit; impossible layouts are refused when the node is built.

Graph outputs are returned in origin layout, so each case converts there and back; the
storage arrays themselves are checked element by element in tests/passes/test_layout.py.
"""

from __future__ import annotations

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand


def _round_trip(origin: str, *formats: str):
    def build(x):
        y, src = x, origin
        for fmt in (*formats, origin):
            y, src = ops.trans_data(y, src_format=src, dst_format=fmt), fmt
        return y

    return build


CASES = [
    OpCase(
        "TransData",
        _round_trip("NCHW", "NHWC"),
        {"x": rand(2, 3, 4, 5)},
        numpy_ref=lambda x: x,
        id="nhwc",
    ),
    OpCase(
        "TransData",
        _round_trip("NCHW", "NC1HWC0", "NHWC"),
        {"x": rand(1, 20, 3, 2, dtype="float16")},
        numpy_ref=lambda x: x,
        id="nc1hwc0-padded-channels",
    ),
    OpCase(
        "TransData",
        _round_trip("ND", "FRACTAL_NZ"),
        {"x": rand(2, 17, 33, dtype="int32", lo=-9, hi=9)},
        numpy_ref=lambda x: x,
        id="fractal-nz",
    ),
    OpCase(
        "TransData",
        _round_trip("NCHW", "NHWC"),
        {"x": rand(3, 2, 4, 4)},
        numpy_ref=lambda x: x,
        symbolic={"x": ("N", 2, 4, 4)},
        id="symbolic-batch",
    ),
    OpCase(
        "TransData",
        lambda x: ops.trans_data(x, src_format="ND", dst_format="NHWC"),
        {"x": rand(3, 4)},
        raises=mdsl.ShapeError,
        id="rank-2-as-nhwc",
    ),
    OpCase(
        "TransData",
        lambda x: ops.trans_data(x, src_format="ND", dst_format="CHWN"),
        {"x": rand(3, 4)},
        raises=mdsl.GraphError,
        id="unknown-format",
    ),
]
