"""Sizes read from a tensor's values at run time: the ValueDims op.

A model may compute a shape from its *data*: Range up to a length it is fed, a Pad by
pads it computes, ConstantOfShape of a size tensor. mdsl holds those parameters as
attributes (so shape inference sees them), which may be symbolic dims. `ValueDims(v)`
turns the elements of a small integer tensor `v` into fresh symbols, its `dynamic`
attr, one per element in row-major order: the node passes `v` through unchanged and
binds each symbol to its element when it runs; ops downstream use the symbols in their
attributes like a feed's symbols (docs/dynamic-shapes.md, "value dims").

Every backend binds them before the sizes they decide are needed: the interpreter when
the node runs; compiled backends before the run (`mdsl.targets.signatures`: the nodes
the values depend on run in the interpreter first), so memory is planned per call with
the actual sizes. Inside an If/Loop body the symbols are bound each time the body runs
and live for that run only; compiled backends plan their buffers at a capacity grown
when a run exceeds it (`mdsl.codegen.plan.capacity_symbol`). A value below 0 or above
`mdsl.ir.dim.MAX_DIM` is an ExecutionError naming the node.

>>> import numpy as np, mdsl
>>> with mdsl.Graph("ramp") as g:
...     n = g.input("n", (), "int64")
...     (length,) = value_dims(n)
...     g.output(mdsl.ops.constant_of_shape((length, 2), 1.0), "y")
>>> mdsl.interpret(g, {"n": np.int64(3)})["y"].shape
(3, 2)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdsl.ir.dim import MAX_DIM
from mdsl.ir.errors import ExecutionError, ShapeError
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.dynamic import DYNAMIC, data_dependent, value_dim
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import normalize_axes, numel

VALUE_DIMS = "ValueDims"
MAX_VALUE_DIMS = 64  # elements: a value dims tensor is a shape, a count, some pads


@op_proto(
    VALUE_DIMS,
    inputs={"values": "int"},
    outputs={"output": "int"},
    attrs={DYNAMIC: Attr([str], default=())},
    category="opaque",
)
def _value_dims(v, *, dynamic):
    """`v` unchanged; its elements become the symbols `dynamic` when the node runs."""
    check(v.is_static, f"a value dims tensor needs a static shape, got {v.describe()}")
    count = numel(v.shape)
    check(count <= MAX_VALUE_DIMS, f"{count} values; at most {MAX_VALUE_DIMS} become dims")
    check(len(dynamic) == count, f"{len(dynamic)} symbol names for {count} values")
    return TensorType(v.shape, v.dtype)


def value_dims(v, *, name: str | None = None) -> tuple:
    """The elements of integer tensor `v` (static shape, at most 64 elements) as symbolic
    dims bound at run time, in row-major order."""
    out = _value_dims(v, name=name)
    return tuple(value_dim(s, hi=MAX_DIM) for s in out.producer.attrs[DYNAMIC])


def is_value_binder(node) -> bool:
    return node.op_type == VALUE_DIMS


def value_symbols(node) -> tuple[str, ...]:
    """The symbols value-binder `node` binds from its input's values (else empty)."""
    return tuple(node.attrs.get(DYNAMIC) or ()) if is_value_binder(node) else ()


def bound_values(node, array) -> dict[str, int]:
    """symbol -> value for value-binder `node` run on `array`; a ShapeError when a value
    is no valid size."""
    values = np.asarray(array).reshape(-1)
    out = {}
    for symbol, value in zip(value_symbols(node), values.tolist()):
        if not 0 <= int(value) <= MAX_DIM:
            raise ShapeError(
                f"value {value} of {node.inputs[0].name} becomes dim {symbol}, which must "
                f"be in [0, {MAX_DIM}]: a size computed at run time is negative or too large"
            )
        out[symbol] = int(value)
    return out


register_op_impl(VALUE_DIMS, lambda v, **_: np.array(v, copy=True))
data_dependent(VALUE_DIMS, count=lambda v, **_: numel(v.shape), bounds=lambda v, **_: [])


@op_proto(
    "DynamicSlice",
    inputs={"x": "any", "starts": "int", "ends": "int"},
    outputs={"y": "any"},
    attrs={
        "axes": Attr([int], default=None),
        "steps": Attr([int], default=None),
        "lengths": Attr([int], default=None),
        DYNAMIC: Attr([str], default=()),
    },
    category="opaque",
)
def _dynamic_slice(x, starts, ends, *, axes, steps, lengths, dynamic):
    """`x[starts:ends:steps]` along `axes` with `starts` and `ends` read at run time
    (ONNX Slice, its clamping and negative indices): each sliced axis gets a
    data-dependent length, at most the axis' size, unless `lengths` gives it (-1: not
    given; a slice of another length is an ExecutionError when the node runs)."""
    count = _sliced_count(starts, ends, axes, steps)
    axes = tuple(range(count)) if axes is None else normalize_axes(axes, x.rank)
    check(len(set(axes)) == len(axes), f"axes {axes} repeat an axis")
    check(steps is None or all(s != 0 for s in steps), "slice steps must not be 0")
    check(lengths is None or len(lengths) == count, f"lengths must have {count} entries")
    shape = list(x.shape)
    symbols = iter(dynamic)
    for k, axis in enumerate(axes):
        known = -1 if lengths is None else lengths[k]
        shape[axis] = known if known >= 0 else value_dim(next(symbols))
    return TensorType(tuple(shape), x.dtype)


def dynamic_slice(x, starts, ends, axes=None, steps=None, *, lengths=None, name: str | None = None):
    """`x[starts:ends:steps]` along `axes`, `starts` and `ends` int64 tensors read at run
    time (ONNX Slice); the sliced lengths are data-dependent, at most the axes' sizes,
    except those `lengths` gives (-1: not given; the slice is checked when it runs).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (5,))
    ...     s, e = g.input("s", (1,), "int64"), g.input("e", (1,), "int64")
    ...     g.output(mdsl.ops.dynamic_slice(x, s, e), "y")
    >>> mdsl.interpret(g, {"x": np.arange(5, dtype=np.float32), "s": np.array([-3]),
    ...                    "e": np.array([99])})["y"]
    array([2., 3., 4.], dtype=float32)
    """
    return _dynamic_slice(x, starts, ends, axes=axes, steps=steps, lengths=lengths, name=name)


def _sliced_count(starts, ends, axes, steps) -> int:
    check(starts.rank == 1 and ends.rank == 1, "starts and ends must be 1-D")
    check(starts.is_static and ends.is_static, "starts and ends need static lengths")
    count = starts.shape[0]
    check(ends.shape[0] == count, f"{count} starts but {ends.shape[0]} ends")
    for what, given in (("axes", axes), ("steps", steps)):
        check(given is None or len(given) == count, f"{what} must have {count} entries")
    return count


def _dynamic_slice_ref(x, starts, ends, *, axes, steps, **_):
    count = len(starts)
    axes = range(count) if axes is None else [a % x.ndim for a in axes]
    steps = [1] * count if steps is None else steps
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts.tolist(), ends.tolist(), steps):
        index[a] = slice(s, e, st)
    return np.ascontiguousarray(x[tuple(index)])


def _slice_bounds(x, starts, ends, *, axes, steps, lengths=None, **_):
    count = starts.shape[0]
    axes = range(count) if axes is None else normalize_axes(axes, x.rank)
    steps = [1] * count if steps is None else steps
    lengths = [-1] * count if lengths is None else lengths
    return [
        x.shape[a] if abs(st) == 1 else -(-x.shape[a] // abs(st))
        for a, st, n in zip(axes, steps, lengths)
        if n < 0
    ]


def _unknown_lengths(x, starts, ends, *, lengths=None, **_) -> int:
    return starts.shape[0] if lengths is None else sum(1 for n in lengths if n < 0)


register_op_impl("DynamicSlice", _dynamic_slice_ref)
data_dependent("DynamicSlice", count=_unknown_lengths, bounds=_slice_bounds)


@op_proto(
    "DynamicReshape",
    inputs={"x": "any", "shape": "int"},
    outputs={"y": "any"},
    attrs={
        "allowzero": Attr(bool, default=False),
        "sizes": Attr([int], default=None),
        DYNAMIC: Attr([str], default=()),
    },
    category="opaque",
)
def _dynamic_reshape(x, shape, *, allowzero, sizes, dynamic):
    """`x` reshaped to `shape`, an int64 vector read at run time (ONNX Reshape: 0 copies
    the input's dim unless `allowzero`, one -1 is inferred): every output dim is
    data-dependent, at most numel(x) (so an empty x reshapes to zero-size dims only); a
    shape that does not fit is an ExecutionError. `sizes`, where the importer knows the
    shape's values as value dims (`mdsl.ops.runtime_sizes`), bounds each dim by its value
    (a value dim that is 0 at run time, copying the input's dim, then exceeds its bound:
    an ExecutionError); -1 entries are bounded by numel(x)."""
    check(
        shape.rank == 1 and shape.is_static,
        f"shape must be a static vector, got {shape.describe()}",
    )
    check(len(dynamic) == shape.shape[0], f"{len(dynamic)} symbol names for rank {shape.shape[0]}")
    check(
        sizes is None or len(sizes) == shape.shape[0],
        f"{len(sizes or ())} sizes for a shape of {shape.shape[0]} entries",
    )
    return TensorType(tuple(value_dim(s) for s in dynamic), x.dtype)


def dynamic_reshape(x, shape, *, allowzero: bool = False, sizes=None, name: str | None = None):
    """`x` reshaped to the int64 vector `shape` read at run time (ONNX Reshape); the
    output dims are data-dependent (compiled backends size them by numel(x)).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (2, 6))
    ...     s = g.input("s", (2,), "int64")
    ...     g.output(mdsl.ops.dynamic_reshape(x, s), "y")
    >>> mdsl.interpret(g, {"x": np.zeros((2, 6), np.float32), "s": np.array([-1, 4])})["y"].shape
    (3, 4)
    """
    return _dynamic_reshape(x, shape, allowzero=allowzero, sizes=sizes, name=name)


def reshaped_dims(in_shape: tuple, shape, allowzero: bool) -> tuple[int, ...]:
    """The dims ONNX Reshape gives `in_shape` for target `shape`; ShapeError if none."""
    target = [int(v) for v in np.asarray(shape).reshape(-1)]
    if not allowzero:
        for i, v in enumerate(target):
            if v == 0:
                if i >= len(in_shape):
                    raise ExecutionError(f"shape {target}: 0 at axis {i} copies no input dim")
                target[i] = in_shape[i]
    total = int(np.prod(in_shape, dtype=np.int64)) if in_shape else 1
    if target.count(-1) > 1 or any(v < -1 for v in target):
        raise ExecutionError(f"shape {target} has a negative size (one -1 at most is inferred)")
    if -1 in target:
        known = int(np.prod([v for v in target if v != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ExecutionError(f"cannot reshape {tuple(in_shape)} ({total} elements) to {target}")
        target[target.index(-1)] = total // known
    if int(np.prod(target, dtype=np.int64)) != total or any(v > MAX_DIM for v in target):
        raise ExecutionError(f"cannot reshape {tuple(in_shape)} ({total} elements) to {target}")
    return tuple(target)


def _dynamic_reshape_ref(x, shape, *, allowzero=False, **_):
    return np.ascontiguousarray(x).reshape(reshaped_dims(x.shape, shape, allowzero))


def _reshape_bounds(x, shape, *, allowzero=False, sizes=None, **_) -> list:
    """Each output dim at most numel(x), or what `sizes` says it is: its value, the
    input's dim for a 0 that copies it."""
    whole = numel(x.shape)
    if sizes is None:
        return [whole] * shape.shape[0]
    bounds = []
    for axis, size in enumerate(sizes):
        if isinstance(size, int) and size == -1:
            bounds.append(whole)
        elif isinstance(size, int) and size == 0 and not allowzero:
            bounds.append(x.shape[axis] if axis < x.rank else 0)
        else:
            bounds.append(size)
    return bounds


register_op_impl("DynamicReshape", _dynamic_reshape_ref)
data_dependent(
    "DynamicReshape",
    count=lambda x, shape, **_: shape.shape[0],
    bounds=_reshape_bounds,
    invalid="the shape read at run time is invalid or does not fit the input (cannot "
    "reshape: a negative size, two -1s, a 0 copying no input dim, or a product that is not "
    "the input's element count)",
)


@op_proto(
    "DynamicCrop",
    inputs={"x": "any", "crops": "int"},
    outputs={"y": "any"},
    attrs={DYNAMIC: Attr([str], default=())},
    category="opaque",
)
def _dynamic_crop(x, crops, *, dynamic):
    """`x` with crops[i] elements removed from the start of axis i and crops[rank + i]
    from its end (ONNX Pad's negative pads), read at run time: every output dim is
    data-dependent, at most the input's; a crop below 0 or beyond a dim is an
    ExecutionError."""
    check(
        crops.rank == 1 and crops.is_static,
        f"crops must be a static vector, got {crops.describe()}",
    )
    check(
        crops.shape[0] == 2 * x.rank,
        f"{crops.shape[0]} crops for rank {x.rank} (needs {2 * x.rank})",
    )
    check(len(dynamic) == x.rank, f"{len(dynamic)} symbol names for rank {x.rank}")
    return TensorType(tuple(value_dim(s) for s in dynamic), x.dtype)


def dynamic_crop(x, crops, *, name: str | None = None):
    """`x` cropped by the int64 vector `crops` (begins of every axis, then ends) read at
    run time.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (4,))
    ...     c = g.input("c", (2,), "int64")
    ...     g.output(mdsl.ops.dynamic_crop(x, c), "y")
    >>> mdsl.interpret(g, {"x": np.arange(4, dtype=np.float32), "c": np.array([1, 2])})["y"]
    array([1.], dtype=float32)
    """
    return _dynamic_crop(x, crops, name=name)


def _dynamic_crop_ref(x, crops, **_):
    crops = [int(c) for c in np.asarray(crops).reshape(-1)]
    index = []
    for axis, size in enumerate(x.shape):
        begin, end = crops[axis], crops[x.ndim + axis]
        if begin < 0 or end < 0 or begin + end > size:
            raise ExecutionError(
                f"axis {axis} of size {size} cropped by {begin} and {end}: a run-time pad "
                "makes the dim negative"
            )
        index.append(slice(begin, size - end))
    return np.ascontiguousarray(x[tuple(index)])


register_op_impl("DynamicCrop", _dynamic_crop_ref)
data_dependent(
    "DynamicCrop",
    count=lambda x, crops, **_: x.rank,
    bounds=lambda x, crops, **_: list(x.shape),
    invalid="a crop below 0, or a run-time pad that makes the dim negative",
)


@op_proto(
    "DynamicSliceAxes",
    inputs={"x": "any", "starts": "int", "ends": "int", "axes": "int", "steps": "int"},
    outputs={"y": "any"},
    attrs={DYNAMIC: Attr([str], default=())},
    category="opaque",
)
def _dynamic_slice_axes(x, starts, ends, axes, steps, *, dynamic):
    """ONNX Slice with its axes and steps too read at run time: which axes are sliced
    is known only then, so every output dim is data-dependent, at most the input's."""
    count = _sliced_count(starts, ends, None, None)
    for what, t in (("axes", axes), ("steps", steps)):
        check(
            t.rank == 1 and t.is_static and t.shape[0] == count, f"{what} must have {count} entries"
        )
    check(len(dynamic) == x.rank, f"{len(dynamic)} symbol names for rank {x.rank}")
    return TensorType(tuple(value_dim(s) for s in dynamic), x.dtype)


def dynamic_slice_axes(x, starts, ends, axes, steps, *, name: str | None = None):
    """`x[starts:ends:steps]` along `axes`, all four int64 vectors read at run time
    (ONNX Slice); every output dim is data-dependent.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (3, 4))
    ...     s, e, a, st = (g.input(n, (1,), "int64") for n in "seat")
    ...     g.output(mdsl.ops.dynamic_slice_axes(x, s, e, a, st), "y")
    >>> feeds = {"s": np.array([3]), "e": np.array([0]), "a": np.array([-1]), "t": np.array([-2])}
    >>> mdsl.interpret(g, {"x": np.arange(12, dtype=np.float32).reshape(3, 4), **feeds})["y"]
    array([[ 3.,  1.],
           [ 7.,  5.],
           [11.,  9.]], dtype=float32)
    """
    return _dynamic_slice_axes(x, starts, ends, axes, steps, name=name)


def _dynamic_slice_axes_ref(x, starts, ends, axes, steps, **_):
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    steps = [int(s) for s in np.asarray(steps).reshape(-1)]
    if any(not -x.ndim <= a < x.ndim for a in axes) or len(
        {a % max(x.ndim, 1) for a in axes}
    ) != len(axes):
        raise ExecutionError(f"slice axes {axes} are outside rank {x.ndim} or repeat an axis")
    if any(s == 0 for s in steps):
        raise ExecutionError(f"slice steps {steps} hold a 0")
    return _dynamic_slice_ref(x, starts, ends, axes=axes, steps=steps)


register_op_impl("DynamicSliceAxes", _dynamic_slice_axes_ref)
data_dependent(
    "DynamicSliceAxes",
    count=lambda x, *_, **__: x.rank,
    bounds=lambda x, *_, **__: list(x.shape),
    invalid="the slice axes read at run time are outside rank or repeat an axis, or a step is 0",
)


# compiled loops for the C backend (runtime_sizes.c) that report the sizes they produced
C_SOURCE = Path(__file__).with_name("runtime_sizes.c").read_text()
register_op_impl("DynamicCrop", backend="c", source=C_SOURCE, symbol="runtime_sizes_dynamic_crop")
register_op_impl(
    "DynamicReshape", backend="c", source=C_SOURCE, symbol="runtime_sizes_dynamic_reshape"
)
register_op_impl("DynamicSlice", backend="c", source=C_SOURCE, symbol="runtime_sizes_dynamic_slice")
register_op_impl(
    "DynamicSliceAxes", backend="c", source=C_SOURCE, symbol="runtime_sizes_dynamic_slice_axes"
)
