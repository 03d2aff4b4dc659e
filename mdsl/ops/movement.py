"""Data movement: Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Slice, Cast, Identity,
Expand, Tile, DepthToSpace, SpaceToDepth.

Where ONNX passes compile-time parameters as tensor inputs (Reshape's shape, Slice's
starts/ends, Squeeze's axes, Expand's shape, Tile's repeats), mdsl holds them as attributes
so shape inference at build time can see them; the ONNX importer folds constant inputs into
these attributes.
"""

from __future__ import annotations

import builtins
from pathlib import Path

import numpy as np

from mdsl.expr.numpy_ops import saturating_astype
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import DTypeError
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check
from mdsl.ops.shape_rules import (
    broadcast_shapes,
    divide_exactly,
    normalize_axes,
    normalize_axis,
    numel,
    require_static,
    unify_dims,
)

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
    if not x.rank:
        axis = 0
    else:  # axis may be rank (all dims first); a negative axis counts from rank, as in ONNX
        axis = normalize_axis(axis, x.rank + 1 if axis >= 0 else x.rank)
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
    if isinstance(dim, int) and (isinstance(start, Dim) or isinstance(end, Dim)):
        return _static_dim_symbolic_bounds(dim, start, end, step)
    if isinstance(dim, int):
        return len(range(*_py_slice(start, end, step).indices(dim)))
    check(step > 0, f"negative slice steps need a static dim, got {dim}")
    start = dim + start if start < 0 else start
    end = dim if end >= INT_MAX // 2 else (dim + end if end < 0 else end)
    length = end - start
    return length if step == 1 else (length + step - 1) // step


def _static_dim_symbolic_bounds(dim: int, start, end, step):
    """`x[start:end]` of a static dim with symbolic bounds (a position table sliced to
    the sequence length S): exact only when the bounds' declared ranges prove
    0 <= start <= end <= dim, since the clamping ONNX does is not an expression."""
    check(step == 1, f"a slice with symbolic bounds needs step 1, got {step}")
    lo_start, hi_start = _range_of(start)
    lo_end, hi_end = _range_of(end)
    check(
        lo_start >= 0
        and hi_start is not None
        and lo_end >= hi_start
        and hi_end is not None
        and hi_end <= dim,
        f"slice [{start}:{end}] of a dim of {dim}: its bounds' ranges do not prove "
        f"0 <= start <= end <= {dim} (declare the symbols with max <= {dim})",
    )
    return end - start


def _range_of(d) -> tuple[int, int | None]:
    if isinstance(d, int):
        return d, d
    if d.name is not None:
        return d.min, d.max
    return -1, None  # an expression: no range known


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
    """Convert elements to dtype `to`; a float out of an integer dtype's range saturates
    to it and NaN becomes 0 (numpy and C leave both undefined; every backend agrees)."""
    return TensorType(x.shape, to, x.format)


@op_proto(
    "BitCast",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"to": Attr(DType)},
    category="opaque",
)
def bit_cast(x, *, to):
    """The bits of each element read as dtype `to`, which must be as wide as x's dtype
    (ONNX BitCast; numpy's `view`).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.bit_cast(g.input("x", (1,)), to=mdsl.int32), "y")
    >>> mdsl.interpret(g, {"x": np.array([1.0], np.float32)})["y"]
    array([1065353216], dtype=int32)
    """
    check(
        to.itemsize == x.dtype.itemsize,
        f"BitCast from {x.dtype} to {to}: the types must be as wide "
        f"({x.dtype.itemsize} vs {to.itemsize} bytes)",
        DTypeError,
    )
    return TensorType(x.shape, to, x.format)


@op_proto(
    "ReverseSequence",
    inputs={"x": "any", "sequence_lens": "int64"},
    outputs={"y": "any"},
    attrs={"batch_axis": Attr(int, default=1), "time_axis": Attr(int, default=0)},
    category="opaque",
)
def reverse_sequence(x, sequence_lens, *, batch_axis, time_axis):
    """For each batch entry b, its first sequence_lens[b] steps along `time_axis` in
    reverse order, the rest as they are (ONNX ReverseSequence). `batch_axis` and
    `time_axis` are 0 and 1 in some order.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x, n = g.input("x", (2, 3)), g.input("n", (2,), "int64")
    ...     g.output(mdsl.ops.reverse_sequence(x, n, batch_axis=0, time_axis=1), "y")
    >>> mdsl.interpret(g, {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([3, 2])})["y"]
    array([[2., 1., 0.],
           [4., 3., 5.]], dtype=float32)
    """
    check(x.rank >= 2, f"ReverseSequence needs an input of rank >= 2, got rank {x.rank}")
    check(
        {batch_axis, time_axis} == {0, 1},
        f"ReverseSequence: batch_axis and time_axis must be 0 and 1, got {batch_axis}, {time_axis}",
    )
    check(sequence_lens.rank == 1, f"sequence_lens must be 1-D, got shape {sequence_lens.shape}")
    unify_dims(sequence_lens.shape[0], x.shape[batch_axis], "sequence_lens vs the batch size")
    return TensorType(x.shape, x.dtype, x.format)


def _reverse_sequence_ref(x, sequence_lens, *, batch_axis, time_axis):
    y = x.copy()
    steps = x.shape[time_axis]
    for b, n in enumerate(sequence_lens.tolist()):
        if not 0 <= n <= steps:
            raise ValueError(f"sequence_lens[{b}] = {n} is outside [0, {steps}]")
        picked = [_py_slice(None)] * x.ndim
        picked[batch_axis], picked[time_axis] = b, _py_slice(0, n)
        y[tuple(picked)] = np.flip(x[tuple(picked)], axis=time_axis - (batch_axis < time_axis))
    return y


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
register_op_impl("Cast", lambda x, *, to: saturating_astype(x, to.np))
register_op_impl("Identity", lambda x: x.copy())
register_op_impl("BitCast", lambda x, *, to: np.array(x, order="C").view(to.np))
register_op_impl("ReverseSequence", _reverse_sequence_ref)


@op_proto(
    "Expand",
    inputs={"input": "any"},
    outputs={"output": "any"},
    attrs={"shape": Attr([int])},
    category="data_movement",
)
def _expand(x, *, shape):
    """Broadcast `x` against `shape` (numpy rules, both ways: a 1 in `shape` keeps the
    input's dim), ONNX Expand. A size-1 dim stretches to a symbolic target dim: kernels
    read the output's shape, and the runtime evaluates the attr for the reference."""
    check(all(not (isinstance(d, int) and d < 0) for d in shape), f"negative dim in {_s(shape)}")
    out = broadcast_shapes(x.shape, shape)
    return TensorType(out, x.dtype)


def expand(x, shape, *, name: str | None = None) -> Tensor:
    """Broadcast `x` to `shape` with numpy's rules (ONNX Expand: a 1 in `shape` keeps the
    input's dim, so the result may be larger than `shape`).

    `shape` is an attribute, not ONNX's tensor input, so build-time shape inference sees it.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.expand(g.input("x", ("N", 1)), ["N", 4])
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 4)
    """
    shape = [Dim(d) if isinstance(d, str) else d for d in shape]
    return _expand(x, shape=shape, name=name)


def _expand_ref(x, *, shape):
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))).copy()


@op_proto(
    "Tile",
    inputs={"input": "any"},
    outputs={"output": "any"},
    attrs={"repeats": Attr([int])},
    category="data_movement",
)
def _tile(x, *, repeats):
    """Repeat `x` `repeats[i]` times along each axis i (ONNX Tile)."""
    check(
        len(repeats) == x.rank,
        f"repeats has {len(repeats)} values for an input of rank {x.rank}",
    )
    check(
        all(not isinstance(r, int) or r >= 0 for r in repeats),
        f"repeats {tuple(repeats)} must be >= 0",
    )
    return TensorType(tuple(d * r for d, r in zip(x.shape, repeats)), x.dtype, x.format)


def tile(x, repeats, *, name: str | None = None) -> Tensor:
    """Repeat `x` along every axis (ONNX Tile; numpy.tile with one count per axis).

    `repeats` is an attribute, not ONNX's tensor input, so build-time shape inference sees it.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.tile(g.input("x", ("N", 3)), [2, 2])
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('2*N'), 6)
    """
    return _tile(x, repeats=repeats, name=name)


@op_proto(
    "DepthToSpace",
    inputs={"input": "any"},
    outputs={"output": "any"},
    attrs={"blocksize": Attr(int), "mode": Attr(str, default="DCR", choices=("DCR", "CRD"))},
    category="data_movement",
)
def depth_to_space(x, *, blocksize, mode):
    """Move channel blocks into spatial blocks: NCHW (N, C, H, W) -> (N, C/b², H*b, W*b)
    (ONNX DepthToSpace; "CRD" is torch's pixel_shuffle, "DCR" the ONNX default).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.depth_to_space(g.input("x", ("N", 8, "H", 5)), blocksize=2)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 2, Dim('2*H'), 10)
    """
    _check_block_input("DepthToSpace", x, blocksize)
    n, c, h, w = x.shape
    c_out = divide_exactly(c, blocksize * blocksize, f"DepthToSpace channels by {blocksize}²")
    return TensorType((n, c_out, h * blocksize, w * blocksize), x.dtype, x.format)


@op_proto(
    "SpaceToDepth",
    inputs={"input": "any"},
    outputs={"output": "any"},
    attrs={"blocksize": Attr(int)},
    category="data_movement",
)
def space_to_depth(x, *, blocksize):
    """Move spatial blocks into channels: (N, C, H, W) -> (N, C*b², H/b, W/b); the
    inverse of DepthToSpace in "DCR" mode (ONNX SpaceToDepth).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.space_to_depth(g.input("x", ("N", 3, 8, 6)), blocksize=2)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 12, 4, 3)
    """
    _check_block_input("SpaceToDepth", x, blocksize)
    n, c, h, w = x.shape
    b = blocksize
    h_out = divide_exactly(h, b, f"SpaceToDepth height by {b}")
    w_out = divide_exactly(w, b, f"SpaceToDepth width by {b}")
    return TensorType((n, c * b * b, h_out, w_out), x.dtype, x.format)


def _check_block_input(op_type: str, x, blocksize: int) -> None:
    check(x.rank == 4, f"{op_type} needs a 4-D (N, C, H, W) input, got rank {x.rank}")
    require_static([blocksize], "blocksize")
    check(blocksize >= 1, f"blocksize must be >= 1, got {blocksize}")


def _depth_to_space_ref(x, *, blocksize, mode):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth_ref(x, *, blocksize):
    n, c, h, w = x.shape
    b = blocksize
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


register_op_impl("Expand", _expand_ref)
register_op_impl("Tile", lambda x, *, repeats: np.tile(x, repeats))
register_op_impl("DepthToSpace", _depth_to_space_ref)
register_op_impl("SpaceToDepth", _space_to_depth_ref)

# a compiled loop of its own (masks.c), so the C backend needs no callback
MASKS_C_SOURCE = (Path(__file__).with_name("masks.c")).read_text()
register_op_impl(
    "ReverseSequence", backend="c", source=MASKS_C_SOURCE, symbol="masks_reverse_sequence"
)
register_op_impl("BitCast", backend="c", source=MASKS_C_SOURCE, symbol="masks_bit_cast")
