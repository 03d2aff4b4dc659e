"""Data movement: Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Slice, Cast, Identity.

Where ONNX passes compile-time parameters as tensor inputs (Reshape's shape, Slice's
starts/ends, Squeeze's axes), mdsl holds them as attributes so shape inference at build
time can see them; the ONNX importer folds constant inputs into these attributes.
"""

from __future__ import annotations

import builtins

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import divide_exactly, normalize_axes, normalize_axis, numel

INT_MAX = 2**63 - 1


@op_proto(
    "Reshape",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"shape": Attr([int]), "allowzero": Attr(bool, default=False)},
    category="data_movement",
)
def reshape(x, *, shape, allowzero):
    """Reshape to `shape`; -1 infers one dim, 0 copies the input's dim (ONNX).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.reshape(g.input("x", ("N", 4, 6)), shape=(0, -1, 3))
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 8, 3)
    """
    return TensorType(resolve_reshape(x.shape, shape, allowzero), x.dtype)


def resolve_reshape(in_shape: tuple, target: tuple, allowzero: bool = False) -> tuple:
    out = []
    infer_at = None
    for i, d in enumerate(target):
        if isinstance(d, int) and d == -1:
            check(infer_at is None, f"reshape target {tuple(target)} has more than one -1")
            infer_at = i
            out.append(1)
        elif isinstance(d, int) and d == 0 and not allowzero:
            check(i < len(in_shape), f"reshape target {tuple(target)}: 0 at {i} has no input dim")
            out.append(in_shape[i])
        else:
            check(not (isinstance(d, int) and d < 0), f"reshape target has negative dim {d}")
            out.append(d)
    total, known = numel(in_shape), numel(out)
    if infer_at is not None:
        out[infer_at] = divide_exactly(total, known, f"reshape {_s(in_shape)} to {_s(target)}")
    else:
        check(total == known, f"cannot reshape {_s(in_shape)} ({total} elements) to {_s(out)}")
    return tuple(out)


def _s(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _reshape_ref(x, *, shape, allowzero):
    target = [x.shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(shape)]
    return x.reshape(target)


@op_proto(
    "Transpose",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"perm": Attr([int], default=None)},
    category="data_movement",
)
def transpose(x, *, perm):
    """Permute axes; `perm=None` reverses them (ONNX)."""
    perm = tuple(reversed(range(x.rank))) if perm is None else perm
    check(
        sorted(normalize_axes(perm, x.rank, "perm")) == list(range(x.rank)),
        f"perm {tuple(perm)} is not a permutation of {x.rank} axes",
    )
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


@op_proto(
    "Flatten",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"axis": Attr(int, default=1)},
    category="data_movement",
)
def flatten(x, *, axis):
    """Collapse to 2-D: dims before `axis` and dims from `axis` on (ONNX)."""
    axis = normalize_axis(axis, x.rank + 1) if x.rank else 0
    return TensorType((numel(x.shape[:axis]), numel(x.shape[axis:])), x.dtype)


@op_proto(
    "Squeeze",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"axes": Attr([int], default=None)},
    category="data_movement",
)
def squeeze(x, *, axes):
    """Remove size-1 dims at `axes` (all static 1s when None)."""
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if isinstance(d, int) and d == 1]
    axes = normalize_axes(axes, x.rank)
    for a in axes:
        check(x.shape[a] == 1, f"cannot squeeze axis {a} of size {x.shape[a]}")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


@op_proto(
    "Unsqueeze",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"axes": Attr([int])},
    category="data_movement",
)
def unsqueeze(x, *, axes):
    """Insert size-1 dims so they stand at `axes` of the output."""
    rank = x.rank + len(axes)
    axes = normalize_axes(axes, rank)
    dims = iter(x.shape)
    return TensorType(tuple(1 if i in axes else next(dims) for i in range(rank)), x.dtype)


@op_proto(
    "Slice",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={
        "starts": Attr([int]),
        "ends": Attr([int]),
        "axes": Attr([int], default=None),
        "steps": Attr([int], default=None),
    },
    category="data_movement",
)
def slice(x, *, starts, ends, axes, steps):
    """Slice `x[starts:ends:steps]` along `axes` (ONNX clamping rules)."""
    axes = tuple(range(len(starts))) if axes is None else normalize_axes(axes, x.rank)
    steps = (1,) * len(starts) if steps is None else steps
    check(
        len(starts) == len(ends) == len(axes) == len(steps),
        "starts, ends, axes and steps must have one entry per sliced axis",
    )
    shape = list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        shape[a] = sliced_length(shape[a], s, e, st)
    return TensorType(tuple(shape), x.dtype)


def sliced_length(dim, start, end, step):
    check(step != 0, "slice step must not be 0")
    if isinstance(dim, int):
        return len(range(*_py_slice(start, end, step).indices(dim)))
    check(step > 0, f"negative slice steps need a static dim, got {dim}")
    start = dim + start if start < 0 else start
    end = dim if end >= INT_MAX // 2 else (dim + end if end < 0 else end)
    length = end - start
    return length if step == 1 else (length + step - 1) // step


_py_slice = builtins.slice


def _slice_ref(x, *, starts, ends, axes, steps):
    axes = range(len(starts)) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    index = [_py_slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = _py_slice(s, e, st)
    return x[tuple(index)]


@op_proto(
    "Cast",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"to": Attr(DType)},
    category="pointwise",
)
def cast(x, *, to):
    """Convert elements to dtype `to`."""
    return TensorType(x.shape, to, x.format)


@op_proto("Identity", inputs={"x": "any"}, outputs={"y": "any"}, category="data_movement")
def identity(x):
    """The input, unchanged."""
    return x


register_op_impl("Reshape", _reshape_ref)
register_op_impl("Transpose", lambda x, *, perm: np.transpose(x, perm))
register_op_impl(
    "Flatten",
    lambda x, *, axis: x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))),
)
register_op_impl(
    "Squeeze", lambda x, *, axes: np.squeeze(x, axis=None if axes is None else tuple(axes))
)
register_op_impl("Unsqueeze", lambda x, *, axes: np.expand_dims(x, tuple(axes)))
register_op_impl("Slice", _slice_ref)
register_op_impl("Cast", lambda x, *, to: x.astype(to.np))
register_op_impl("Identity", lambda x: x.copy())
