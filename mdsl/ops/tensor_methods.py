"""Tensor operator overloads and methods, recording nodes in the graph being built.

They are installed on `mdsl.ir.Tensor` here because the IR must not depend on the builder
(the IR is the bottom of the stack); this module is the one place that happens.
"""

from __future__ import annotations

from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError
from mdsl.ir.graph import Tensor
from mdsl.ir.source import user_source
from mdsl.ir.tracebacks import api_boundary
from mdsl.ops import elementwise as ew
from mdsl.ops import indexing, linalg, movement, reduce


def _binary(builder, reflected=False):
    def method(self, other):
        return builder(other, self) if reflected else builder(self, other)

    return method


def _shape_args(args) -> tuple:
    """Accept both `t.reshape((2, 3))` and numpy's varargs `t.reshape(2, 3)`."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def reshape(self, *shape):
    """Reshape (numpy/ONNX semantics: one -1 is inferred)."""
    return movement.reshape(self, shape=_shape_args(shape))


def transpose(self, *perm):
    """Permute axes; no arguments reverses them (numpy)."""
    perm = _shape_args(perm)
    return movement.transpose(self, perm=perm or None)


def astype(self, dtype):
    return movement.cast(self, to=DType.of(dtype))


def _reduction(builder):
    def method(self, axis=None, keepdims=False):
        axes = None if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
        return builder(self, axes=axes, keepdims=keepdims)

    return method


def getitem(self, index):
    """numpy indexing: ints, slices, None and Ellipsis (Slice/Squeeze/Unsqueeze), plus one
    integer Tensor index on one axis (Gather), e.g. `table[ids]` or `x[:, idx]`."""
    items = index if isinstance(index, tuple) else (index,)
    items = _expand_ellipsis(items, self.ndim)
    items, tensor_index, tensor_at = _take_tensor_index(self, items)
    gather_axis = None
    starts, ends, axes, steps, squeeze, unsqueeze = [], [], [], [], [], []
    axis = out_axis = 0
    for position, item in enumerate(items):
        if position == tensor_at:
            gather_axis = out_axis
        if item is None:
            unsqueeze.append(out_axis)
            out_axis += 1
            continue
        if isinstance(item, bool) or not isinstance(item, (int, slice)):
            raise GraphError(
                f"tensor {self.name}: index {item!r} is not supported; "
                "use ints, slices, None, ... or one integer Tensor"
            )
        if isinstance(item, int):
            starts.append(item)
            ends.append(movement.INT_MAX if item == -1 else item + 1)
            steps.append(1)
            axes.append(axis)
            squeeze.append(axis)
        elif item != slice(None):
            start, stop, step = item.start, item.stop, item.step or 1
            default_start, default_stop = (
                (0, movement.INT_MAX) if step > 0 else (-1, -movement.INT_MAX)
            )
            starts.append(default_start if start is None else start)
            ends.append(default_stop if stop is None else stop)
            steps.append(step)
            axes.append(axis)
            out_axis += 1
        else:
            out_axis += 1
        axis += 1
    if axis > self.ndim:
        raise GraphError(f"tensor {self.name}: too many indices ({axis}) for rank {self.ndim}")
    out = self
    if axes:
        out = movement.slice(out, starts=starts, ends=ends, axes=axes, steps=steps)
    if squeeze:
        out = movement.squeeze(out, axes=squeeze)
    if unsqueeze:
        out = movement.unsqueeze(out, axes=unsqueeze)
    if tensor_index is not None:
        out = indexing.gather(out, tensor_index, axis=gather_axis)
    return out


def _take_tensor_index(self, items: tuple) -> tuple:
    """(items with the Tensor index replaced by a full slice, the Tensor, its position).

    Only layouts where Gather gives numpy's answer are accepted: numpy moves the indexed
    dims to the front when ints (also "advanced" indices there) are not next to the Tensor.
    """
    at = [i for i, item in enumerate(items) if isinstance(item, Tensor)]
    if not at:
        return items, None, None
    if len(at) > 1:
        raise GraphError(
            f"tensor {self.name}: only one Tensor index is supported; "
            "index in steps (x[i][:, j]) or use mdsl.ops.gather",
            source=user_source(),
        )
    (position,) = at
    index = items[position]
    if index.dtype not in (DType.int32, DType.int64):
        raise GraphError(
            f"tensor {self.name}: a Tensor index must be int32/int64, got {index.dtype} "
            "(boolean masks give data-dependent shapes; use mdsl.ops.where)",
            source=user_source(),
        )
    advanced = [i for i, item in enumerate(items) if isinstance(item, (int, Tensor))]
    if advanced != list(range(advanced[0], advanced[-1] + 1)):
        raise GraphError(
            f"tensor {self.name}: ints separated from the Tensor index by a slice or None "
            "reorder dims in numpy; index in two steps instead",
            source=user_source(),
        )
    return (*items[:position], slice(None), *items[position + 1 :]), index, position


def _expand_ellipsis(items: tuple, rank: int) -> tuple:
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise GraphError("an index can hold only one Ellipsis")
    if Ellipsis not in items:
        return items
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    at = items.index(Ellipsis)
    return items[:at] + (slice(None),) * (rank - used) + items[at + 1 :]


def install() -> None:
    methods = {
        "__add__": _binary(ew.add),
        "__radd__": _binary(ew.add, True),
        "__sub__": _binary(ew.sub),
        "__rsub__": _binary(ew.sub, True),
        "__mul__": _binary(ew.mul),
        "__rmul__": _binary(ew.mul, True),
        "__truediv__": _binary(ew.div),
        "__rtruediv__": _binary(ew.div, True),
        "__pow__": _binary(ew.pow),
        "__rpow__": _binary(ew.pow, True),
        "__matmul__": _binary(linalg.matmul),
        "__rmatmul__": _binary(linalg.matmul, True),
        "__lt__": _binary(ew.less),
        "__le__": _binary(ew.less_equal),
        "__gt__": _binary(ew.greater),
        "__ge__": _binary(ew.greater_equal),
        "__neg__": lambda self: ew.neg(self),
        "__getitem__": getitem,
        "reshape": reshape,
        "transpose": transpose,
        "T": property(lambda self: movement.transpose(self, perm=None)),
        "astype": astype,
        "sum": _reduction(reduce.reduce_sum),
        "mean": _reduction(reduce.reduce_mean),
        "max": _reduction(reduce.reduce_max),
        "min": _reduction(reduce.reduce_min),
        "__array_ufunc__": None,  # numpy defers to our reflected operators
    }
    for name, fn in methods.items():
        setattr(Tensor, name, api_boundary(fn) if callable(fn) else fn)


install()
