"""Ops keeping a data-chosen part of their input: Compress and Unique (ONNX semantics).

How many elements survive is known only when the node runs, so each declares that count
as a data-dependent symbol (`mdsl.ops.dynamic`, docs/dynamic-shapes.md), bounded by the
size of what it filters. The C backend runs both as compiled loops (`filtering.c`, "c"
bindings) that report the count they kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.dynamic import data_dependent, value_dim
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axis, numel


def _filtered_length(x: TensorType, axis):
    return numel(x.shape) if axis is None else x.shape[normalize_axis(axis, x.rank)]


@op_proto(
    "Compress",
    inputs={"x": "any", "condition": "bool"},
    outputs={"y": "any"},
    attrs={"axis": Attr(int, default=None), "dynamic": Attr([str], default=())},
    category="opaque",
)
def _compress(x, condition, *, axis, dynamic):
    """The slices of `x` along `axis` (of the flattened x when None) where `condition`
    holds; a condition shorter than the axis drops the rest (ONNX Compress)."""
    check(condition.rank == 1, f"condition must be 1-D, got shape {condition.shape}")
    (count,) = dynamic
    if axis is None:
        return TensorType((value_dim(count),), x.dtype)
    shape = list(x.shape)
    shape[normalize_axis(axis, x.rank)] = value_dim(count)
    return TensorType(tuple(shape), x.dtype)


def compress(x, condition, *, axis: int | None = None, name=None) -> Tensor:
    """The slices of `x` along `axis` where the boolean `condition` holds (ONNX Compress;
    numpy.compress). Their number is known only at run time.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.compress(g.input("x", (3, 2)), g.input("c", (3,), "bool"), axis=0)
    ...     g.output(y, "y")
    >>> x = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> mdsl.interpret(g, {"x": x, "c": np.array([True, False, True])})["y"]
    array([[0., 1.],
           [4., 5.]], dtype=float32)
    """
    return _compress(x, condition, axis=axis, name=name)


def _compress_ref(x, condition, *, axis, **_):
    length = x.size if axis is None else x.shape[axis]
    if condition.size > length:
        raise ValueError(f"condition has {condition.size} entries, the axis only {length}")
    return np.compress(condition, x, axis=axis)


@op_proto(
    "Unique",
    inputs={"x": "any"},
    outputs={"y": "any", "indices": "int64", "inverse_indices": "int64", "counts": "int64"},
    attrs={
        "axis": Attr(int, default=None),
        "sorted": Attr(bool, default=True),
        "dynamic": Attr([str], default=()),
    },
    category="opaque",
)
def _unique(x, *, axis, sorted, dynamic):
    """The distinct elements of `x` (distinct slices along `axis`), the index of each
    one's first occurrence, each element's position among them, and their counts (ONNX
    Unique); ascending with `sorted`, else in order of first occurrence."""
    (count,) = dynamic
    u = value_dim(count)
    if axis is None:
        y = TensorType((u,), x.dtype)
    else:
        shape = list(x.shape)
        shape[normalize_axis(axis, x.rank)] = u
        y = TensorType(tuple(shape), x.dtype)
    inverse = TensorType((_filtered_length(x, axis),), DType.int64)
    return y, TensorType((u,), DType.int64), inverse, TensorType((u,), DType.int64)


def unique(x, *, axis: int | None = None, sorted: bool = True, name=None) -> tuple[Tensor, ...]:
    """(values, first indices, inverse indices, counts) of the distinct elements of `x`
    (ONNX Unique; numpy.unique with every return_* set).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     outs = mdsl.ops.unique(g.input("x", (5,)), sorted=False)
    ...     for out, label in zip(outs, ("y", "first", "inverse", "counts")):
    ...         g.output(out, label)
    >>> out = mdsl.interpret(g, {"x": np.array([3, 1, 3, 2, 1], np.float32)})
    >>> out["y"], out["counts"]
    (array([3., 1., 2.], dtype=float32), array([2, 2, 1]))
    """
    return _unique(x, axis=axis, sorted=sorted, name=name)


def _unique_ref(x, *, axis, sorted, **_):
    flat = x.reshape(-1) if axis is None else x
    values, first, inverse, counts = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sorted:  # renumber by first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_int = (np.asarray(a, np.int64) for a in (first, inverse, counts))
    return (values.astype(x.dtype), *as_int)


register_op_impl("Compress", _compress_ref)
register_op_impl("Unique", _unique_ref)
C_SOURCE = "\n".join(
    Path(__file__).with_name(f).read_text() for f in ("stable_sort.c", "filtering.c")
)
register_op_impl("Compress", backend="c", source=C_SOURCE, symbol="filtering_compress")
register_op_impl("Unique", backend="c", source=C_SOURCE, symbol="filtering_unique")
data_dependent(
    "Compress",
    count=lambda x, condition, **_: 1,
    bounds=lambda x, condition, *, axis, **_: [_filtered_length(x, axis)],
)
data_dependent(
    "Unique", count=lambda x, **_: 1, bounds=lambda x, *, axis, **_: [_filtered_length(x, axis)]
)
