"""Joining tensors along an axis and cutting one apart: Concat and its inverse, Split.

ONNX passes Split's sizes as a tensor input; mdsl holds them as the `split` attribute so
shape inference at build time sees them (the ONNX importer folds a constant input into it).
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.family import same_dtype
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, In, check
from mdsl.ops.shape_rules import normalize_axis, require_static, unify_dims


@op_proto(
    "Concat",
    inputs={"inputs": In("any", variadic=True)},
    outputs={"concat_result": "any"},
    attrs={"axis": Attr(int)},
    category="data_movement",
)
def _concat(*inputs, axis):
    """Join `inputs` along `axis`; every other dim must agree (ONNX Concat)."""
    same_dtype("Concat", *inputs)
    first = inputs[0]
    for i, t in enumerate(inputs[1:], start=1):
        check(
            t.rank == first.rank,
            f"input {i} has rank {t.rank}, input 0 has rank {first.rank}; Concat needs equal ranks",
        )
    axis = normalize_axis(axis, first.rank)
    shape = list(first.shape)
    for i, t in enumerate(inputs[1:], start=1):
        for a, d in enumerate(t.shape):
            if a == axis:
                shape[a] = shape[a] + d
            else:
                shape[a] = unify_dims(shape[a], d, f"Concat input {i} dim {a} differs from input 0")
    return TensorType(tuple(shape), first.dtype)


def concat(inputs, axis: int, *, name: str | None = None) -> Tensor:
    """Concatenate a list of tensors along `axis` (ONNX Concat); symbolic dims add up.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     a, b = g.input("a", ("N", 4)), g.input("b", ("M", 4))
    ...     y = mdsl.ops.concat([a, b], 0)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('M+N'), 4)
    """
    return _concat(inputs, axis=axis, name=name)


@op_proto(
    "Split",
    inputs={"input": "any"},
    outputs={"outputs": In("any", variadic=True)},
    attrs={
        "axis": Attr(int, default=0),
        "split": Attr([int], default=None),
        "num_outputs": Attr(int, default=None),
    },
    category="data_movement",
)
def _split(x, *, axis, split, num_outputs):
    """Cut `x` along `axis` into pieces of sizes `split`, or into `num_outputs` pieces
    (ONNX Split; with num_outputs the last piece is smaller when the dim does not divide)."""
    axis = normalize_axis(axis, x.rank)
    dim = x.shape[axis]
    check(
        (split is None) != (num_outputs is None),
        "Split takes exactly one of `split` (sizes) and `num_outputs`",
    )
    sizes = split_sizes(dim, split, num_outputs)
    return tuple(
        TensorType((*x.shape[:axis], s, *x.shape[axis + 1 :]), x.dtype, x.format) for s in sizes
    )


def split_sizes(dim, split, num_outputs) -> list:
    """The size of each piece of `dim` (static or symbolic)."""
    if split is not None:
        check(len(split) > 0, "Split needs at least one size")
        require_static(split, "Split sizes")
        shown = ", ".join(map(str, split))
        check(all(s >= 0 for s in split), f"Split sizes ({shown}) include a negative size")
        total = sum(split)
        check(total == dim, f"Split sizes ({shown}) sum to {total}, but the dim is {dim}")
        return list(split)
    check(num_outputs >= 1, f"num_outputs must be >= 1, got {num_outputs}")
    if dim % num_outputs == 0:
        return [dim // num_outputs] * num_outputs
    chunk = (dim + num_outputs - 1) // num_outputs
    last = dim - chunk * (num_outputs - 1)
    if isinstance(dim, int):
        check(last > 0, f"cannot split a dim of {dim} into {num_outputs} non-empty pieces")
    return [chunk] * (num_outputs - 1) + [last]


def split(
    x, split=None, *, axis: int = 0, num_outputs: int | None = None, name=None
) -> tuple[Tensor, ...]:
    """Split `x` along `axis` into pieces of the sizes in `split` (or into `num_outputs`
    near-equal pieces); returns a tuple of tensors (ONNX Split).

    `split` is an attribute, not ONNX's tensor input, so build-time shape inference sees it.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     q, k, v = mdsl.ops.split(g.input("x", ("N", 12)), [4, 4, 4], axis=1)
    ...     g.output(v, "v")
    >>> v.shape
    (Dim('N'), 4)
    """
    return _split(x, axis=axis, split=split, num_outputs=num_outputs, name=name)


def _split_ref(x, *, axis, split, num_outputs):
    sizes = split_sizes(x.shape[axis], split, num_outputs)
    bounds = np.cumsum(sizes)[:-1]
    return [piece.copy() for piece in np.split(x, bounds, axis=axis)]


register_op_impl("Concat", lambda *xs, axis: np.concatenate(xs, axis=axis))
register_op_impl("Split", _split_ref)
