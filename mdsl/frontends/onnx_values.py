"""Compile-time values of the ONNX importer: decoding, converting and computing them.

A compile-time value is a numpy array. When it is computed from symbolic shapes (a
`Shape` of an input declared `("N", 3)`) it is an array of dtype object holding ints and
`Dim`s; the few ops exporters use on shapes (Gather, Concat, Unsqueeze, Slice, Mul, ...)
are computed on such arrays here, every other op through ONNX's reference
implementation on plain arrays.
"""

from __future__ import annotations

import numpy as np

from mdsl.frontends.onnx_ops import dtype_from_onnx, onnx_type_name
from mdsl.ir.dim import Dim
from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.tensor_type import TensorType


def array_from_tensor_proto(proto) -> np.ndarray:
    """A TensorProto's value (GraphError for dtypes mdsl lacks or broken data)."""
    from onnx import numpy_helper

    if dtype_from_onnx(proto.data_type) is None:
        raise GraphError(
            f"tensor {proto.name or '(unnamed)'} has type {onnx_type_name(proto.data_type)}, "
            "which mdsl does not support"
        )
    if any(d < 0 for d in proto.dims):
        raise GraphError(f"tensor {proto.name or '(unnamed)'} has negative dims {list(proto.dims)}")
    if proto.data_location == 1 and not proto.raw_data:  # EXTERNAL, not loaded
        raise GraphError(
            f"tensor {proto.name!r} keeps its data in an external file that was not loaded; "
            "load the model from its path so the data is found next to it"
        )
    try:
        array = numpy_helper.to_array(proto)
    except (ValueError, TypeError) as e:
        raise GraphError(f"tensor {proto.name or '(unnamed)'}: unreadable data ({e})") from None
    array = np.array(array)  # own, writable-free copy
    array.setflags(write=False)
    return array


def attr_value(value, kind: str, name: str):
    """An ONNX attribute value converted to an mdsl attr of `kind`."""
    if kind == "bool":
        return bool(int(value))
    if kind == "str":
        return value.decode() if isinstance(value, bytes) else str(value)
    if kind == "dtype":
        dtype = dtype_from_onnx(int(value))
        if dtype is None:
            raise GraphError(
                f"attribute {name}: type {onnx_type_name(int(value))} is not supported"
            )
        return dtype
    if kind == "tensor":
        return array_from_tensor_proto(value)
    if kind == "list[str]":
        return tuple(v.decode() if isinstance(v, bytes) else str(v) for v in value)
    if kind in ("list[int]", "list[float]"):
        return tuple(int(v) if kind == "list[int]" else float(v) for v in value)
    return int(value) if kind == "int" else float(value) if kind == "float" else value


def attr_from_array(array: np.ndarray, kind: str, name: str):
    """A compile-time input value as an mdsl attr of `kind` (ints may be symbolic Dims)."""
    flat = list(np.asarray(array).reshape(-1))
    if kind == "list[int]":
        return tuple(_int_or_dim(v) for v in flat)
    if kind == "list[float]":
        return tuple(float(v) for v in flat)
    if len(flat) != 1:
        raise GraphError(f"input for attribute {name!r} must hold one value, got {len(flat)}")
    if kind == "int":
        return _int_or_dim(flat[0])
    if kind == "float":
        return float(flat[0])
    if kind == "bool":
        return bool(flat[0])
    raise GraphError(f"attribute {name!r} of kind {kind} cannot come from an input")


def cast_value(value: np.ndarray, dtype) -> np.ndarray | None:
    """`value` cast to mdsl dtype `dtype` (symbolic values only to integer types)."""
    if value.dtype == object:
        return value if dtype.is_int else None
    return value.astype(dtype.np)


def _int_or_dim(v):
    return v if isinstance(v, Dim) else int(v)


def shape_value(node, ttype: TensorType) -> np.ndarray:
    """The value of a Shape (with start/end) or Size node over a tensor of type `ttype`."""
    if node.op_type == "Size":
        return _dims_array(ttype.numel, ())
    start = int(node.attrs.get("start", 0))
    end = node.attrs.get("end")
    dims = list(ttype.shape)[slice(start, None if end is None else int(end))]
    return _dims_array(dims, (len(dims),))


def _dims_array(dims, shape) -> np.ndarray:
    flat = dims if isinstance(dims, list) else [dims]
    if all(isinstance(d, int) for d in flat):
        return np.array(flat, dtype=np.int64).reshape(shape)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)


def normalized(array: np.ndarray) -> np.ndarray:
    """An object array holding only ints becomes int64 again."""
    if array.dtype == object and all(not isinstance(v, Dim) for v in array.reshape(-1)):
        return np.array(array.tolist(), dtype=np.int64).reshape(array.shape)
    return array


EVALUATION_SIZE_CAP = 1 << 24  # elements: a larger result stays a run-time node


def evaluate_node(node, args: list) -> list[np.ndarray] | None:
    """The outputs of `node` over compile-time `args`, or None if they cannot be
    computed now (the node then runs at run time) or are larger than
    EVALUATION_SIZE_CAP elements. Every import-time evaluation goes through here."""
    results = _evaluate(node, args)
    if results is not None and any(r.size > EVALUATION_SIZE_CAP for r in results):
        return None
    return results


def _evaluate(node, args: list) -> list[np.ndarray] | None:
    if any(a is not None and a.dtype == object for a in args):
        rule = _SYMBOLIC.get(node.op_type)
        if rule is None:
            return None
        try:
            result = rule(node, *args)
            parts = result if isinstance(result, list) else [result]
            return [normalized(np.asarray(part)) for part in parts]
        except (ValueError, TypeError, IndexError, ArithmeticError, MdslError):
            return None  # e.g. a slice to a symbolic end: a run-time node computes it
    return _reference(node, args)


def _reference(node, args: list) -> list[np.ndarray] | None:
    from onnx.reference import ReferenceEvaluator

    feeds = {name: a for name, a in zip(node.inputs, args) if name}
    try:
        evaluator = ReferenceEvaluator(node.proto, opsets={"": node.opset})
        results = evaluator.run(None, feeds)
    except Exception:  # the reference refuses: the node will run at run time instead
        return None
    return [np.asarray(r) for r in results]


# -- ops on symbolic shape values ---------------------------------------------------------
def _axes(node, given, rank_hint=None):
    if given is not None:
        return [int(a) for a in np.asarray(given).reshape(-1)]
    return [int(a) for a in node.attrs.get("axes", [])]


def _gather(node, data, indices):
    axis = int(node.attrs.get("axis", 0))
    return np.take(data, indices.astype(np.int64), axis=axis)


def _concat(node, *parts):
    return np.concatenate(
        [np.asarray(p, dtype=object) for p in parts], axis=int(node.attrs["axis"])
    )


def _unsqueeze(node, data, axes=None):
    axes = _axes(node, axes)
    rank = data.ndim + len(axes)
    out = data
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return out


def _squeeze(node, data, axes=None):
    axes = _axes(node, axes)
    return np.squeeze(data, axis=tuple(axes)) if axes else np.squeeze(data)


def _slice(node, data, starts=None, ends=None, axes=None, steps=None):
    if starts is None:  # opset < 10: attributes
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes = node.attrs.get("axes")
    starts = [int(s) for s in np.asarray(starts).reshape(-1)]
    ends = [int(e) for e in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else _axes(node, axes)
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    return data[tuple(index)]


def _split(node, data, split=None):
    """Split (opsets 2 to 18: `split` attribute or input, or `num_outputs` from 18)."""
    axis = int(node.attrs.get("axis", 0))
    if split is None:
        split = node.attrs.get("split")
    size = data.shape[axis]
    if split is None:
        parts = int(node.attrs.get("num_outputs", len(node.outputs)))
        chunk = -(-size // parts)
        split = [min(chunk, size - k * chunk) for k in range(parts)]
    edges = np.cumsum([int(s) for s in np.asarray(split).reshape(-1)])[:-1]
    return list(np.split(data, edges, axis=axis))


def has_symbolic_rule(op_type: str) -> bool:
    """Whether values holding symbolic dims are computed through `op_type` at import time."""
    return op_type in _SYMBOLIC


def _cast(node, data):
    from mdsl.ir.dtype import DType

    target = dtype_from_onnx(int(node.attrs["to"]))
    if target is None or not (target.is_int and target != DType.bool_):
        raise TypeError("symbolic dims only cast to integer types")
    return data


def _reshape(node, data, shape):
    shape = [int(s) for s in np.asarray(shape).reshape(-1)]
    allowzero = int(node.attrs.get("allowzero", 0))
    dims = [data.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(shape)]
    return data.reshape(dims)


def _binary(fn):
    return lambda node, a, b: fn(np.asarray(a, dtype=object), np.asarray(b, dtype=object))


def _where(node, cond, a, b):
    return np.where(np.asarray(cond, dtype=bool), a, b)


def _equal(node, a, b):
    pairs = np.broadcast(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    return np.array([x == y for x, y in pairs], dtype=bool).reshape(pairs.shape)


_SYMBOLIC = {
    "Gather": _gather,
    "Split": _split,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Slice": _slice,
    "Cast": _cast,
    "Identity": lambda node, x: x,
    "Reshape": _reshape,
    "Add": _binary(lambda a, b: a + b),
    "Sub": _binary(lambda a, b: a - b),
    "Mul": _binary(lambda a, b: a * b),
    "Div": _binary(lambda a, b: a // b),
    "Neg": lambda node, x: -x,
    "Equal": _equal,
    "Where": _where,
}
