"""Reading a tensor's shape as data: Shape and Size (ONNX), int64 results.

With symbolic dims the values are known only at run time, but the output shape is
always static: Shape gives one entry per (selected) axis, Size a scalar.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr


@op_proto(
    "Shape",
    inputs={"data": "any"},
    outputs={"shape": ["int64"]},
    attrs={"start": Attr(int, default=0), "end": Attr(int, default=None)},
    category="opaque",
)
def shape(x, *, start, end):
    """The dims of `x` as a 1-D int64 tensor, axes `start:end` only (Python slice rules,
    as in ONNX Shape).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     s = mdsl.ops.shape(g.input("x", ("N", 3, "H", "W")), start=-2)
    ...     g.output(s, "hw")
    >>> s.shape, s.dtype
    ((2,), mdsl.int64)
    """
    return TensorType((len(range(x.rank)[start:end]),), "int64")


@op_proto("Size", inputs={"data": "any"}, outputs={"size": ["int64"]}, category="opaque")
def size(x):
    """The number of elements of `x` as a 0-d int64 tensor (ONNX Size).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     n = mdsl.ops.size(g.input("x", ("N", 3)))
    ...     g.output(n, "n")
    >>> n.shape, n.dtype
    ((), mdsl.int64)
    """
    return TensorType((), "int64")


register_op_impl(
    "Shape", lambda x, *, start, end: np.array(x.shape, dtype=np.int64)[start:end].copy()
)
register_op_impl("Size", lambda x: np.array(x.size, dtype=np.int64))
