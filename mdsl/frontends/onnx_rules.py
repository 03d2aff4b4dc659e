"""Import rules for ONNX ops that are not a plain table entry (see `onnx_ops`).

Two kinds:

- version adapters: ops whose meaning or signature changed across opsets in ways a
  table entry cannot say (Softmax before opset 13 flattens to 2-D; Clip's bounds were
  attributes before opset 11; Resize's inputs moved; Split, reductions, Dropout, ...);
- compositions: ONNX ops mdsl spells as several of its ops (Sum, Mean, LRN, Selu,
  Softsign, RMSNormalization, ...). Their nodes are grouped in a layer named after the
  ONNX node, so the graph still shows one block per ONNX op.

A rule is `rule(ctx, node) -> list of output Tensors` (None for an ONNX output mdsl does
not produce); `ctx` is the importer (`onnx_import._Importer`).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from mdsl.frontends.onnx_ops import MAPPINGS, REDUCTIONS, dtype_from_onnx
from mdsl.frontends.onnx_values import array_from_tensor_proto, attr_from_array
from mdsl.ir.dim import MAX_DIM, Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError, ShapeError
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.registry import get_op
from mdsl.ops.runtime_sizes import value_dims

RULES: dict = {}
# ONNX input positions each rule needs as compile-time values (the conformance runner
# binds such inputs of the ONNX test cases from their data).
RULE_CONSTANT_INPUTS: dict[str, tuple[int, ...]] = {}


def rule(*op_types: str, constant_inputs: tuple[int, ...] = ()):
    def register(fn):
        for op_type in op_types:
            RULES[op_type] = fn
            if constant_inputs:
                RULE_CONSTANT_INPUTS[op_type] = constant_inputs
        return fn

    return register


def split_scope(name: str):
    from mdsl.frontends.onnx_import import split_scope as split

    return split(name)


def emit1(ctx, op_type: str, *inputs, **attrs):
    """Record one mdsl node and return its single output."""
    return ctx.emit(op_type, list(inputs), attrs)[0]


def constant_value(node) -> np.ndarray:
    """The value of an ONNX Constant node."""
    attrs = node.attrs
    if "value" in attrs:
        return array_from_tensor_proto(attrs["value"])
    scalars = {
        "value_float": np.float32,
        "value_floats": np.float32,
        "value_int": np.int64,
        "value_ints": np.int64,
    }
    for key, dtype in scalars.items():
        if key in attrs:
            value = np.array(attrs[key], dtype=dtype)
            value.setflags(write=False)
            return value
    kinds = ", ".join(attrs) or "none"
    raise GraphError(f"Constant holds {kinds}; mdsl supports numeric tensors only")


def import_mdsl_op(ctx, node, op_type: str | None = None) -> list:
    """A node of the mdsl domain (written by mdsl's exporter), or of a custom domain the
    user mapped to `op_type`: the registered op, inputs in order, attributes as attrs."""
    from mdsl.frontends.onnx_import import convert_attrs

    op_type = op_type or node.op_type
    opdef = get_op(op_type)
    attrs = convert_attrs(node, opdef, None)
    inputs = [ctx.input_tensor(node, i) for i in range(len(node.inputs))]
    with ctx.scope_of(node) as leaf:
        return ctx.emit(op_type, inputs, attrs, name=leaf)


def _mapped(ctx, node, attrs: dict, inputs: list, op_type: str | None = None) -> list:
    with ctx.scope_of(node) as leaf:
        return ctx.emit(op_type or node.op_type, inputs, attrs, name=leaf)


def _attr(node, key: str, default):
    return node.attrs.get(key, default)


# -- version adapters -----------------------------------------------------------------------
@rule("Softmax", "LogSoftmax", "Hardmax")
def softmax_family(ctx, node) -> list:
    """Before opset 13 these flatten x to 2-D at `axis` (default 1) and work on the
    second dim; from 13 on they work on the one axis (default -1)."""
    x = ctx.input_tensor(node, 0)
    legacy = node.opset < 13
    axis = int(_attr(node, "axis", 1 if legacy else -1))
    axis = axis + x.ndim if axis < 0 else axis
    if node.op_type == "Hardmax":
        with ctx.scope_of(node, composite=True):
            if legacy and axis != x.ndim - 1:
                flat = emit1(ctx, "Flatten", x, axis=axis)
                return [emit1(ctx, "Reshape", _hardmax(ctx, flat, 1), shape=x.shape)]
            return [_hardmax(ctx, x, axis)]
    if not legacy or axis == x.ndim - 1:
        return _mapped(ctx, node, {"axis": axis}, [x])
    with ctx.scope_of(node, composite=True):
        flat = emit1(ctx, "Flatten", x, axis=axis)
        y = emit1(ctx, node.op_type, flat, axis=-1)
        return [emit1(ctx, "Reshape", y, shape=x.shape)]


def _hardmax(ctx, x, axis: int):
    index = emit1(ctx, "ArgMax", x, axis=axis, keepdims=False)
    values = np.array([0, 1], dtype=x.dtype.np)
    return emit1(ctx, "OneHot", index, values, depth=x.shape[axis], axis=axis)


@rule("Clip")
def clip(ctx, node) -> list:
    """Clip's bounds are attributes before opset 11 and optional inputs after."""
    x = ctx.input_tensor(node, 0)
    if node.opset < 11:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
        bounds = [None if b is None else np.array(b, dtype=x.dtype.np) for b in (lo, hi)]
    else:
        bounds = [ctx.input_tensor(node, 1), ctx.input_tensor(node, 2)]
    return _mapped(ctx, node, {}, [x, *bounds])


_RESIZE_ATTRS = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a")


@rule("Resize", "Upsample", constant_inputs=(1, 2, 3))
def resize(ctx, node) -> list:
    """Upsample and Resize-10 take (X, scales) and interpolate "asymmetric"ally; from
    opset 11 Resize takes (X, roi, scales, sizes) and says how in its attributes."""
    x = ctx.input_tensor(node, 0)
    _refuse_resize_features(node)
    legacy = node.op_type == "Upsample" or node.opset < 11
    attrs = {
        k: _text(node.attrs[k]) if k != "cubic_coeff_a" else float(node.attrs[k])
        for k in _RESIZE_ATTRS
        if k in node.attrs
    }
    if "exclude_outside" in node.attrs:
        attrs["exclude_outside"] = bool(node.attrs["exclude_outside"])
    if "axes" in node.attrs:
        attrs["axes"] = tuple(int(a) for a in node.attrs["axes"])
    if legacy:
        attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        if attrs.get("mode") in ("bilinear", "trilinear"):
            attrs["mode"] = "linear"
        given = {"scales": ctx.constant_input(node, 1, "scales")}
    else:
        given = {
            "scales": ctx.constant_input(node, 2, "scales"),
            "sizes": ctx.constant_input(node, 3, "sizes"),
        }
    for key, value in given.items():
        if value is not None and value.size:
            kind = "list[float]" if key == "scales" else "list[int]"
            attrs[key] = attr_from_array(value, kind, key)
    return _mapped(ctx, node, attrs, [x], op_type="Resize")


def _refuse_resize_features(node) -> None:
    problems = []
    if int(_attr(node, "antialias", 0)):
        problems.append("antialias=1")
    if _text(_attr(node, "keep_aspect_ratio_policy", "stretch")) != "stretch":
        problems.append("keep_aspect_ratio_policy other than 'stretch'")
    if _text(_attr(node, "coordinate_transformation_mode", "")) == "tf_crop_and_resize":
        problems.append("coordinate_transformation_mode 'tf_crop_and_resize' (roi)")
    if problems:
        raise GraphError(f"mdsl's Resize does not support {', '.join(problems)}")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@rule("Split", constant_inputs=(1,))
def split(ctx, node) -> list:
    """Sizes are an attribute before opset 13, an input after; with neither (nor
    num_outputs, opset 18) the dim splits evenly into one piece per output."""
    x = ctx.input_tensor(node, 0)
    attrs = {"axis": int(_attr(node, "axis", 0))}
    sizes = node.attrs.get("split") if node.opset < 13 else ctx.constant_input(node, 1, "split")
    if sizes is not None and len(sizes):
        attrs["split"] = attr_from_array(np.asarray(sizes), "list[int]", "split")
    else:
        attrs["num_outputs"] = int(_attr(node, "num_outputs", len(node.outputs)))
    return _mapped(ctx, node, attrs, [x])


@rule(*sorted(REDUCTIONS), "ReduceLogSum", constant_inputs=(1,))
def reduce(ctx, node) -> list:
    """Axes are an attribute or (ReduceSum from 13, the others from 18) an input; empty
    axes reduce everything unless noop_with_empty_axes, which makes the op an identity."""
    x = ctx.input_tensor(node, 0)
    since = 18 if node.op_type == "ReduceLogSum" else MAPPINGS[node.op_type].attr_inputs[0].since
    if node.opset >= since:
        axes = ctx.constant_input(node, 1, "axes")
    else:
        axes = node.attrs.get("axes")
    axes = (
        None
        if axes is None or not len(axes)
        else attr_from_array(np.asarray(axes), "list[int]", "axes")
    )
    attrs = {"axes": axes, "keepdims": bool(_attr(node, "keepdims", 1))}
    if axes is None and int(_attr(node, "noop_with_empty_axes", 0)):
        return _mapped(ctx, node, {}, [x], op_type="Identity")
    if node.op_type == "ReduceLogSum":
        with ctx.scope_of(node, composite=True):
            return [emit1(ctx, "Log", emit1(ctx, "ReduceSum", x, **attrs))]
    if x.dtype == DType.bool_ and node.op_type in ("ReduceMax", "ReduceMin"):
        with ctx.scope_of(node, composite=True):  # any / all, over 0s and 1s
            as_int = emit1(ctx, "Cast", x, to=DType.uint8)
            reduced = emit1(ctx, node.op_type, as_int, **attrs)
            return [emit1(ctx, "Cast", reduced, to=DType.bool_)]
    return _mapped(ctx, node, attrs, [x])


@rule("Dropout", constant_inputs=(1, 2))
def dropout(ctx, node) -> list:
    """Inference dropout only: training_mode (an input from opset 12) must be false."""
    x = ctx.input_tensor(node, 0)
    attrs = {}
    if "seed" in node.attrs:
        attrs["seed"] = int(node.attrs["seed"])
    if node.opset < 12:
        if "ratio" in node.attrs:
            attrs["ratio"] = float(node.attrs["ratio"])
    else:
        ratio = ctx.constant_input(node, 1, "ratio")
        if ratio is not None:
            attrs["ratio"] = float(ratio.reshape(-1)[0])
        training = ctx.constant_input(node, 2, "training_mode")
        if training is not None and bool(training.reshape(-1)[0]):
            raise GraphError(
                "training_mode=true is not supported (mdsl's Dropout is inference only)"
            )
    outputs = _mapped(ctx, node, attrs, [x])
    if len(node.outputs) > 1 and node.outputs[1] in ctx.used:
        with ctx.scope_of(node, composite=True):  # in inference the mask keeps everything
            outputs.append(emit1(ctx, "Expand", np.bool_(True), shape=x.shape))
    return outputs


@rule("Cast", "CastLike")
def cast(ctx, node) -> list:
    """Cast to `to` (CastLike: to the element type of the second input). A float
    becoming float8/float4 saturates to the type's finite range unless `saturate=0`
    (mdsl's Cast converts as ml_dtypes does: out of range becomes inf or NaN), so the
    importer clips first."""
    x = ctx.input_tensor(node, 0)
    if node.op_type == "CastLike":
        target = ctx.type_of(node.inputs[1]).dtype
    else:
        target = dtype_from_onnx(int(node.attrs["to"]))
        if target is None:
            raise GraphError(f"Cast to element type {node.attrs['to']} is not supported")
    round_mode = _plain(_attr(node, "round_mode", "up"))
    if round_mode != "up" and target == DType.float8_e8m0fnu:
        raise GraphError(f"Cast to float8e8m0: round_mode={round_mode!r} is not supported")
    if not (_saturates(target) and int(_attr(node, "saturate", 1)) and not x.dtype.is_int):
        return _mapped(ctx, node, {"to": target}, [x], op_type="Cast")
    with ctx.scope_of(node, composite=True):
        wide = x if x.dtype.is_float else emit1(ctx, "Cast", x, to=DType.float32)
        info = ml_dtypes.finfo(target.np)  # float8e8m0 holds positive powers of two only
        low = float(info.tiny) if target == DType.float8_e8m0fnu else -float(info.max)
        lo, hi = (wide.dtype.np.type(v) for v in (low, float(info.max)))
        return [emit1(ctx, "Cast", emit1(ctx, "Clip", wide, lo, hi), to=target)]


def _saturates(dtype: DType) -> bool:
    """The storage floats ONNX's `saturate` applies to."""
    return dtype.is_storage and dtype.name.startswith(("float8", "float4"))


def _plain(value):
    return value.decode() if isinstance(value, bytes) else value


@rule("Range", constant_inputs=(0, 1, 2))
def range_(ctx, node) -> list:
    """mdsl's Range takes start, limit and delta as attributes; when one is computed at
    run time, its length is a value dim (`_run_time_range`)."""
    values = [ctx.value(name) for name in node.inputs[:3]]
    dtype = ctx.type_of(node.inputs[0]).dtype
    if any(v is None for v in values):
        return _run_time_range(ctx, node, dtype)
    start, limit, delta = (_scalar_or_dim(v) for v in values)
    return _mapped(ctx, node, {"start": start, "limit": limit, "delta": delta, "dtype": dtype}, [])


def _run_time_range(ctx, node, dtype: DType) -> list:
    """Range over run-time scalars, as ONNX defines it: n = max(ceil((limit - start) /
    delta), 0) (computed in float64) becomes a value dim, and the output is start +
    delta * [0, 1, ..., n - 1] in the inputs' dtype."""
    start, limit, delta = (ctx.tensor(name) for name in node.inputs[:3])
    with ctx.scope_of(node, composite=True):
        wide = [emit1(ctx, "Cast", t, to=DType.float64) for t in (start, limit, delta)]
        span = emit1(ctx, "Div", emit1(ctx, "Sub", wide[1], wide[0]), wide[2])
        count = emit1(ctx, "Cast", emit1(ctx, "Relu", emit1(ctx, "Ceil", span)), to=DType.int64)
        (n,) = value_dims(count, name="length")
        steps = emit1(ctx, "Range", start=0.0, limit=n, delta=1.0, dtype=DType.int64)
        steps = emit1(ctx, "Cast", steps, to=dtype)
        return [emit1(ctx, "Add", start, emit1(ctx, "Mul", steps, delta))]


def _scalar_or_dim(value: np.ndarray):
    """A one-element compile-time value: a float, or a Dim (a shape-derived count)."""
    v = value.reshape(-1)[0]
    return v if isinstance(v, Dim) else float(v)


@rule("GroupNormalization")
def group_norm(ctx, node) -> list:
    """Opsets 18-20 give scale and bias per group; mdsl (like opset 21) per channel."""
    x, scale, bias = (ctx.input_tensor(node, i) for i in range(3))
    groups = int(node.attrs["num_groups"])
    attrs = {"num_groups": groups, "epsilon": float(_attr(node, "epsilon", 1e-5))}
    if node.opset >= 21 or scale.shape[0] == x.shape[1]:
        return _mapped(ctx, node, attrs, [x, scale, bias])
    channels = x.shape[1]
    if not isinstance(channels, int):
        raise GraphError("per-group scale needs a static channel count")
    with ctx.scope_of(node, composite=True):
        per_channel = [_repeat_per_group(ctx, t, groups, channels // groups) for t in (scale, bias)]
        return [emit1(ctx, "GroupNormalization", x, *per_channel, **attrs)]


def _repeat_per_group(ctx, t, groups: int, size: int):
    column = emit1(ctx, "Unsqueeze", t, axes=(1,))
    wide = emit1(ctx, "Expand", column, shape=(groups, size))
    return emit1(ctx, "Reshape", wide, shape=(groups * size,))


@rule("QuantizeLinear", "DequantizeLinear")
def quantize(ctx, node) -> list:
    """Per-tensor and per-axis (de)quantization; blocked quantization is refused."""
    from mdsl.frontends.onnx_import import import_mapped

    if int(_attr(node, "block_size", 0)):
        raise GraphError("blocked quantization (block_size > 0) is not supported")
    if node.op_type == "DequantizeLinear" and int(_attr(node, "output_dtype", 0)):
        raise GraphError("DequantizeLinear with output_dtype is not supported")
    kept = {k: v for k, v in node.attrs.items() if k not in ("block_size", "precision")}
    if node.op_type == "QuantizeLinear" and not int(kept.get("output_dtype", 1) or 0):
        kept.pop("output_dtype", None)
    if node.op_type == "DequantizeLinear":
        kept.pop("output_dtype", None)
    trimmed = _with_attrs(node, kept)
    return import_mapped(ctx, trimmed, MAPPINGS[node.op_type])


def _with_attrs(node, attrs: dict):
    from dataclasses import replace

    return replace(node, attrs=attrs)


@rule("Pow")
def pow_(ctx, node) -> list:
    """ONNX lets the exponent's type differ from the base's (the result has the base's);
    mdsl's Pow takes one type, so the exponent is cast, or for an integer base with a
    float exponent the power is taken in the exponent's type and cast back."""
    base, exponent = ctx.input_tensor(node, 0), ctx.input_tensor(node, 1)
    if base.dtype == exponent.dtype:
        return _mapped(ctx, node, {}, [base, exponent])
    with ctx.scope_of(node, composite=True):
        if base.dtype.is_float or not exponent.dtype.is_float:
            return [emit1(ctx, "Pow", base, emit1(ctx, "Cast", exponent, to=base.dtype))]
        wide = emit1(ctx, "Cast", base, to=exponent.dtype)
        return [emit1(ctx, "Cast", emit1(ctx, "Pow", wide, exponent), to=base.dtype)]


@rule("DFT", constant_inputs=(1, 2))
def dft(ctx, node) -> list:
    """dft_length (input 1) and, from opset 20, axis (input 2; before, an attribute
    with default 1) are attributes of mdsl's DFT: they must be known at import time."""
    legacy = node.opset < 20
    length, axis = ctx.constant_input(node, 1, "dft_length"), None
    if not legacy:
        axis = ctx.constant_input(node, 2, "axis")
    attrs = {
        "axis": int(_attr(node, "axis", 1)) if legacy else (-2 if axis is None else int(axis)),
        "inverse": int(_attr(node, "inverse", 0)),
        "onesided": int(_attr(node, "onesided", 0)),
        "dft_length": 0 if length is None else int(length.reshape(-1)[0]),
    }
    return _mapped(ctx, node, attrs, [ctx.input_tensor(node, 0)])


@rule("RoiAlign")
def roi_align(ctx, node) -> list:
    """Opset 10's RoiAlign is opset 16's with coordinate_transformation_mode
    "output_half_pixel" (16 added the attribute, defaulting to "half_pixel")."""
    default_mode = "output_half_pixel" if node.opset < 16 else "half_pixel"
    attrs = {
        "coordinate_transformation_mode": _plain(
            _attr(node, "coordinate_transformation_mode", default_mode)
        ),
        "mode": _plain(_attr(node, "mode", "avg")),
        "output_height": int(_attr(node, "output_height", 1)),
        "output_width": int(_attr(node, "output_width", 1)),
        "sampling_ratio": int(_attr(node, "sampling_ratio", 0)),
        "spatial_scale": float(_attr(node, "spatial_scale", 1.0)),
    }
    return _mapped(ctx, node, attrs, [ctx.input_tensor(node, i) for i in range(3)])


@rule("LayerNormalization")
def layer_norm(ctx, node) -> list:
    """mdsl's LayerNormalization gives Y only; where a model reads ONNX's Mean or
    InvStdDev outputs too, they are computed beside it (in float32, stash_type 1)."""
    from mdsl.frontends.onnx_import import import_mapped

    outputs = import_mapped(ctx, node, MAPPINGS["LayerNormalization"])
    if not any(out in ctx.used for out in node.outputs[1:3] if out):
        return outputs
    if int(_attr(node, "stash_type", 1)) != 1:
        raise GraphError("LayerNormalization's Mean/InvStdDev with stash_type other than 1")
    x = ctx.input_tensor(node, 0)
    axis = int(_attr(node, "axis", -1))
    axes = tuple(range(axis % x.ndim, x.ndim))
    epsilon = float(_attr(node, "epsilon", 1e-5))
    with ctx.scope_of(node, composite=True):
        wide = x if x.dtype == DType.float32 else emit1(ctx, "Cast", x, to=DType.float32)
        mean = emit1(ctx, "ReduceMean", wide, axes=axes, keepdims=True)
        centered = emit1(ctx, "Sub", wide, mean)
        variance = emit1(ctx, "ReduceMean", emit1(ctx, "Mul", centered, centered), axes=axes)
        inv_std = emit1(ctx, "Reciprocal", emit1(ctx, "Sqrt", emit1(ctx, "Add", variance, epsilon)))
    return [outputs[0], mean, inv_std]


@rule("If")
def if_(ctx, node) -> list:
    """An If node: its branches become the subgraphs of an mdsl If (`mdsl.cond`). When
    the condition is known at import time (a rank or shape test, as in the bodies of
    ONNX functions) the branch it picks is imported in place of the node."""
    from mdsl.builder.control_flow import cond

    branches = [node.attrs["then_branch"], node.attrs["else_branch"]]
    known = ctx.value(node.inputs[0])
    if known is not None and known.dtype != object and known.size == 1:
        taken = branches[0] if bool(known.reshape(-1)[0]) else branches[1]
        layer, leaf = split_scope(node.name or node.op_type)
        return ctx.inline_subgraph(taken, (*ctx.scope_base, *layer, leaf))
    if any(o.type.WhichOneof("value") != "tensor_type" for b in branches for o in b.output):
        from mdsl.frontends.onnx_sequences import structured_if

        return structured_if(ctx, node, branches)
    pred = ctx.input_tensor(node, 0)
    with ctx.control_flow_scope(node, "If") as name:
        then_fn, else_fn = (lambda b=b: tuple(ctx.import_subgraph(b, [])) for b in branches)
        try:
            result = cond(pred, then_fn, else_fn, name=name)
        except ShapeError:  # the branches' shapes differ: declare the dims that do
            shapes = _branch_shapes(ctx, (then_fn, else_fn), name)
            result = cond(pred, then_fn, else_fn, shapes=shapes, name=name)
    return list(result) if isinstance(result, tuple) else [result]


def _branch_shapes(ctx, fns, name: str) -> list | None:
    """`shapes=` for an If whose branches give results of different shapes: a new
    symbol for each dim on which they differ (bound when the node runs), None where
    they agree. Ranks must agree (mdsl's types have one rank)."""
    from mdsl.builder.control_flow import result_types

    found = [result_types(fn, [], f"{name}_probe{k}") for k, fn in enumerate(fns)]
    shapes, differ = [], False
    for i, (a, b) in enumerate(zip(*found)):
        if a.shape == b.shape:
            shapes.append(None)
            continue
        if a.rank != b.rank:
            raise GraphError(
                f"If output {i}: the branches give ranks {a.rank} and {b.rank}; mdsl's If "
                "needs one rank per output"
            )
        differ = True
        stem = _symbol_stem(name)
        shapes.append(
            tuple(
                x if x == y else Dim(f"{stem}_out{i}_dim{axis}")
                for axis, (x, y) in enumerate(zip(a.shape, b.shape))
            )
        )
    return shapes if differ else None


@rule("Loop")
def loop(ctx, node) -> list:
    """A Loop node as an mdsl While over (iteration, condition, *state, *scans): it runs
    while the condition holds and the iteration is below the trip count M. A scan output
    (the body's extra results, stacked over the iterations) is a loop var that grows by
    one row per iteration, from an empty (0, ...) tensor: its first dim is a new symbol,
    at most M when M is known at import time."""
    from mdsl.builder.control_flow import result_types, while_loop
    from mdsl.frontends.onnx_sequences import holds_structure, unrolled_loop

    if any(holds_structure(ctx, name) for name in node.inputs[2:]):
        return unrolled_loop(ctx, node)
    body = node.attrs["body"]
    trip_count, condition = ctx.input_tensor(node, 0), ctx.input_tensor(node, 1)
    state = [ctx.input_tensor(node, i) for i in range(2, len(node.inputs))]
    n_state, n_scan = len(state), len(body.output) - 1 - len(state)
    if n_scan < 0:
        raise GraphError(f"Loop body gives {len(body.output)} results for {n_state} values")

    def keep_going(i, c, *_):
        return c if trip_count is None else emit1(ctx, "And", emit1(ctx, "Less", i, trip_count), c)

    def step(i, c, *values):
        c_next, *results = ctx.import_subgraph(body, [i, c, *values[:n_state]])
        rows = [emit1(ctx, "Unsqueeze", t, axes=(0,)) for t in results[n_state:]]
        grown = [
            ctx.emit("Concat", [acc, row], {"axis": 0})[0]
            for acc, row in zip(values[n_state:], rows)
        ]
        return (emit1(ctx, "Add", i, np.int64(1)), c_next, *results[:n_state], *grown)

    with ctx.control_flow_scope(node, "While") as name:
        g = ctx.current_graph()
        start = [g.const(f"{name}_iteration", np.int64(0))]
        if condition is None:
            condition = g.const(f"{name}_condition", np.bool_(True))
        scans, shapes, bounds = [], None, None
        if n_scan:
            probe = [TensorType((), DType.int64), TensorType((), DType.bool_)]
            probe += [t.type for t in state]
            inside: set[str] = set()
            found = result_types(
                lambda i, c, *v: tuple(ctx.import_subgraph(body, [i, c, *v])),
                probe,
                f"{name}_probe",
                bound_inside=inside,
            )
            _check_scan_rows(found[1 + n_state :], inside)
            scans, declared = _empty_scans(ctx, node, found[1 + n_state :], name)
            shapes = [None] * (2 + n_state) + declared
            bounds = _scan_bounds(ctx, node, declared, name)
        inits = (*start, condition, *state, *scans)
        result = while_loop(keep_going, step, inits, shapes=shapes, bounds=bounds, name=name)
    return list(result[2:])


def _check_scan_rows(types: list[TensorType], bound_inside: set[str]) -> None:
    """A scan output stacks rows of one shape: a row size the body computes (a value
    dim, a data-dependent size bound when the body runs) could change between
    iterations, so it is refused (ONNX Runtime fails such a loop when it does)."""
    for k, t in enumerate(types):
        for axis, d in enumerate(t.shape):
            local = sorted(d.free_symbols & bound_inside) if isinstance(d, Dim) else []
            if local:
                raise GraphError(
                    f"Loop scan output {k}: dim {axis} of its rows is {d}, a size the body "
                    f"computes each iteration ({', '.join(local)}); mdsl stacks scan rows of "
                    "one shape, known before the loop runs. Carry the rows as a loop state "
                    "(Concat) or make the size a constant"
                )


def _empty_scans(ctx, node, types: list, name: str) -> tuple[list, list]:
    """Empty (0, ...) initial values of a Loop's scan outputs and their declared shapes
    (T, ...), T a new symbol, at most the trip count when it is an import-time value."""
    trip = ctx.value(node.inputs[0]) if node.inputs and node.inputs[0] else None
    most = None
    if trip is not None and trip.dtype != object:
        most = max(int(trip.reshape(-1)[0]), 0)
    inits, shapes = [], []
    for k, t in enumerate(types):
        count = Dim(f"{_symbol_stem(name)}_scan{k}_rows", max=most)
        zero = np.zeros(1, t.dtype.np)
        inits.append(emit1(ctx, "ConstantOfShape", shape=(0, *t.shape), value=zero))
        shapes.append((count, *t.shape))
    return inits, shapes


def _scan_bounds(ctx, node, declared: list, name: str) -> dict | None:
    """`bounds=` for the scan rows when the trip count is known only at run time: the
    trip count itself, a shape-derived dim or a value dim of clip(M, 0, MAX_DIM), bound
    before the loop runs (at the top level: before the run, so compiled backends plan
    the rows per call; inside a body: each time the body runs). None when M is an
    import-time int (the rows' declared max) or absent."""
    if not node.inputs or not node.inputs[0]:
        return None
    trip = ctx.value(node.inputs[0])
    if trip is not None and trip.dtype != object:
        return None
    if trip is not None:
        bound = trip.reshape(-1)[0]
    else:
        m = ctx.input_tensor(node, 0)
        with ctx.scope_of(node, composite=True):
            m = emit1(ctx, "Reshape", m, shape=(1,))
            m = emit1(ctx, "Min", emit1(ctx, "Max", m, np.int64(0)), np.int64(MAX_DIM))
            (bound,) = value_dims(m, name=f"{_symbol_stem(name)}_trip_count")
    return {shape[0].name: bound for shape in declared}


def _symbol_stem(name: str) -> str:
    stem = "".join(c if c.isalnum() else "_" for c in name)
    return stem if stem[:1].isalpha() else f"loop_{stem}"


SCAN_UNROLL_LIMIT = 4096  # iterations a Scan may unroll into (one body copy each)


@rule("Scan")
def scan(ctx, node) -> list:
    """A Scan (opset 9 on) unrolled over its scan axis, which must be static: iteration
    t imports the body once, on the states and the t-th slice of every scan input, and
    the scan outputs stack the body's per-iteration values (reversed where a direction
    says 1). The unrolled chain compiles like any other graph."""
    if node.opset < 9:
        raise GraphError("Scan before opset 9 (with a batch axis) is not supported")
    body = node.attrs["body"]
    m = int(node.attrs["num_scan_inputs"])
    inputs = [ctx.input_tensor(node, i) for i in range(len(node.inputs))]
    states, scanned = inputs[: len(inputs) - m], inputs[len(inputs) - m :]
    in_axes = _scan_axes(node, "scan_input_axes", scanned)
    in_dirs = list(_attr(node, "scan_input_directions", [0] * m))
    n_out = len(body.output) - len(states)
    out_dirs = list(_attr(node, "scan_output_directions", [0] * n_out))
    lengths = {t.shape[a] for t, a in zip(scanned, in_axes)}
    if len(lengths) != 1 or not all(isinstance(n, int) for n in lengths):
        raise GraphError(f"Scan: the scan inputs' lengths must be one static size, got {lengths}")
    (length,) = lengths
    if not 0 < length <= SCAN_UNROLL_LIMIT:
        raise GraphError(f"Scan over {length} iterations: mdsl unrolls 1 to {SCAN_UNROLL_LIMIT}")
    per_step: list[list] = [[] for _ in range(n_out)]
    with ctx.scope_of(node, composite=True):
        for t in range(length):
            slices = [
                _scan_slice(ctx, x, axis, length - 1 - t if reverse else t)
                for x, axis, reverse in zip(scanned, in_axes, in_dirs)
            ]
            results = ctx.import_subgraph(body, [*states, *slices])
            states = results[: len(states)]
            for out, value in zip(per_step, results[len(states) :]):
                out.append(value)
        stacked = []
        for k, values in enumerate(per_step):
            rank = values[0].ndim + 1
            axis = int(_attr(node, "scan_output_axes", [0] * n_out)[k]) % rank
            pieces = [emit1(ctx, "Unsqueeze", v, axes=(axis,)) for v in values]
            order = pieces[::-1] if out_dirs[k] else pieces
            stacked.append(emit1(ctx, "Concat", *order, axis=axis) if len(order) > 1 else order[0])
    return [*states, *stacked]


def _scan_axes(node, key: str, tensors: list) -> list[int]:
    axes = list(_attr(node, key, [0] * len(tensors)))
    return [int(a) % t.ndim for a, t in zip(axes, tensors)]


def _scan_slice(ctx, x, axis: int, index: int):
    """x[..., index, ...] along `axis`, that axis removed."""
    piece = emit1(ctx, "Slice", x, starts=(index,), ends=(index + 1,), axes=(axis,), steps=(1,))
    return emit1(ctx, "Squeeze", piece, axes=(axis,))


# -- compositions --------------------------------------------------------------------------
def composition(*op_types: str):
    """A rule building the ONNX op from several mdsl ops inside the node's own layer."""

    def register(build):
        @functools.wraps(build)
        def run(ctx, node):
            inputs = [ctx.input_tensor(node, i) for i in range(len(node.inputs))]
            with ctx.scope_of(node, composite=True):
                return [build(ctx, node, *inputs)]

        return rule(*op_types)(run)

    return register


@composition("Sum", "Mean")
def sum_mean(ctx, node, *xs):
    total = xs[0]
    for x in xs[1:]:
        total = emit1(ctx, "Add", total, x)
    if len(xs) == 1:
        total = emit1(ctx, "Identity", total)
    if node.op_type == "Mean" and len(xs) > 1:
        total = emit1(ctx, "Div", total, float(len(xs)))
    return total


@composition("LRN")
def lrn(ctx, node, x):
    """x / (bias + alpha / size * sum of x² over `size` neighbouring channels) ** beta;
    the channel sum is a Conv of ones over (N, 1, C, spatial)."""
    size = int(node.attrs["size"])
    alpha = float(_attr(node, "alpha", 1e-4))
    beta = float(_attr(node, "beta", 0.75))
    bias = float(_attr(node, "bias", 1.0))
    squares = emit1(ctx, "Mul", x, x)
    columns = emit1(ctx, "Reshape", squares, shape=(0, 1, x.shape[1], -1))
    ones = np.ones((1, 1, size, 1), dtype=x.dtype.np)
    before = (size - 1) // 2
    sums = emit1(ctx, "Conv", columns, ones, pads=(before, 0, size - 1 - before, 0))
    sums = emit1(ctx, "Reshape", sums, shape=x.shape)
    scaled = emit1(ctx, "Add", emit1(ctx, "Mul", sums, alpha / size), bias)
    return emit1(ctx, "Div", x, emit1(ctx, "Pow", scaled, beta))


@composition("LpPool")
def lp_pool(ctx, node, x):
    """(sum of |x|^p over each window) ^ (1/p): the window sums are a Conv of ones over
    (N * C, 1, spatial), so pads add zeros as ONNX says."""
    if int(_attr(node, "ceil_mode", 0)):
        raise GraphError("LpPool with ceil_mode=1 is not supported")
    p = float(_attr(node, "p", 2))
    kernel = tuple(int(k) for k in node.attrs["kernel_shape"])
    window = {k: node.attrs[k] for k in ("strides", "pads", "dilations") if k in node.attrs}
    powered = emit1(ctx, "Pow", emit1(ctx, "Abs", x), x.dtype.np.type(p))
    planes = emit1(ctx, "Reshape", powered, shape=(-1, 1, *x.shape[2:]))
    ones = np.ones((1, 1, *kernel), dtype=x.dtype.np)
    auto_pad = _plain(_attr(node, "auto_pad", "NOTSET"))
    sums = emit1(ctx, "Conv", planes, ones, auto_pad=auto_pad, **window)
    sums = emit1(ctx, "Reshape", sums, shape=(*x.shape[:2], *sums.shape[2:]))
    return emit1(ctx, "Pow", sums, x.dtype.np.type(1.0 / p))


@composition("Selu")
def selu(ctx, node, x):
    alpha = float(_attr(node, "alpha", 1.67326319217681884765625))
    gamma = float(_attr(node, "gamma", 1.05070102214813232421875))
    return emit1(ctx, "Mul", emit1(ctx, "Elu", x, alpha=alpha), gamma)


@composition("Celu")
def celu(ctx, node, x):
    alpha = float(_attr(node, "alpha", 1.0))
    return emit1(ctx, "Mul", emit1(ctx, "Elu", emit1(ctx, "Div", x, alpha)), alpha)


@composition("ThresholdedRelu")
def thresholded_relu(ctx, node, x):
    alpha = float(_attr(node, "alpha", 1.0))
    zero = np.zeros((), dtype=x.dtype.np)
    return emit1(ctx, "Where", emit1(ctx, "Greater", x, alpha), x, zero)


@composition("Softsign")
def softsign(ctx, node, x):
    return emit1(ctx, "Div", x, emit1(ctx, "Add", emit1(ctx, "Abs", x), 1.0))


@composition("Mish")
def mish(ctx, node, x):
    return emit1(ctx, "Mul", x, emit1(ctx, "Tanh", emit1(ctx, "Softplus", x)))


@composition("Swish")
def swish(ctx, node, x):
    alpha = float(_attr(node, "alpha", 1.0))
    return emit1(ctx, "Mul", x, emit1(ctx, "Sigmoid", emit1(ctx, "Mul", x, alpha)))


@composition("Shrink")
def shrink(ctx, node, x):
    bias = np.array(_attr(node, "bias", 0.0)).astype(x.dtype.np)
    lambd = np.array(_attr(node, "lambd", 0.5)).astype(x.dtype.np)
    zero = np.zeros((), dtype=x.dtype.np)
    low = emit1(ctx, "Less", x, -lambd)
    high = emit1(ctx, "Greater", x, lambd)
    upper = emit1(ctx, "Where", high, emit1(ctx, "Sub", x, bias), zero)
    return emit1(ctx, "Where", low, emit1(ctx, "Add", x, bias), upper)


@composition("IsInf")
def is_inf(ctx, node, x):
    positive = int(_attr(node, "detect_positive", 1))
    negative = int(_attr(node, "detect_negative", 1))
    found = [
        emit1(ctx, "Equal", x, np.array(sign * np.inf, dtype=x.dtype.np))
        for sign, wanted in ((1, positive), (-1, negative))
        if wanted
    ]
    if not found:
        return emit1(ctx, "Equal", x, np.array(np.nan, dtype=x.dtype.np))  # never true
    return found[0] if len(found) == 1 else emit1(ctx, "Or", *found)


@composition("Sinh", "Cosh")
def sinh_cosh(ctx, node, x):
    up, down = emit1(ctx, "Exp", x), emit1(ctx, "Exp", emit1(ctx, "Neg", x))
    joined = emit1(ctx, "Sub" if node.op_type == "Sinh" else "Add", up, down)
    return emit1(ctx, "Mul", joined, 0.5)


@composition("Tan")
def tan(ctx, node, x):
    return emit1(ctx, "Div", emit1(ctx, "Sin", x), emit1(ctx, "Cos", x))


@composition("LpNormalization")
def lp_normalization(ctx, node, x):
    axis = int(_attr(node, "axis", -1))
    p = int(_attr(node, "p", 2))
    if p not in (1, 2):
        raise GraphError(f"LpNormalization with p={p} (only 1 and 2 exist)")
    norm = emit1(ctx, "ReduceL2" if p == 2 else "ReduceL1", x, axes=(axis,), keepdims=True)
    zero = emit1(ctx, "Equal", norm, 0.0)
    safe = emit1(ctx, "Where", zero, np.ones((), dtype=x.dtype.np), norm)  # 0 / 1 = 0, as ONNX
    return emit1(ctx, "Div", x, safe)


@composition("MeanVarianceNormalization")
def mean_variance_normalization(ctx, node, x):
    axes = tuple(int(a) for a in _attr(node, "axes", (0, 2, 3)))
    mean = emit1(ctx, "ReduceMean", x, axes=axes, keepdims=True)
    centered = emit1(ctx, "Sub", x, mean)
    variance = emit1(ctx, "ReduceMean", emit1(ctx, "Mul", centered, centered), axes=axes)
    return emit1(ctx, "Div", centered, emit1(ctx, "Sqrt", emit1(ctx, "Add", variance, 1e-9)))


@composition("RMSNormalization")
def rms_normalization(ctx, node, x, scale):
    """x / sqrt(mean(x², axes from `axis` on) + epsilon) * scale, computed in float32
    (stash_type 1) and cast back to x's type before the scale."""
    axis = int(_attr(node, "axis", -1))
    epsilon = float(_attr(node, "epsilon", 1e-5))
    if int(_attr(node, "stash_type", 1)) != 1:
        raise GraphError("RMSNormalization with stash_type other than 1 (float32)")
    first = axis + x.ndim if axis < 0 else axis
    wide = x if x.dtype == DType.float32 else emit1(ctx, "Cast", x, to=DType.float32)
    mean_square = emit1(
        ctx, "ReduceMean", emit1(ctx, "Mul", wide, wide), axes=tuple(range(first, x.ndim))
    )
    normalized = emit1(
        ctx, "Mul", wide, emit1(ctx, "Rsqrt", emit1(ctx, "Add", mean_square, epsilon))
    )
    if x.dtype != DType.float32:
        normalized = emit1(ctx, "Cast", normalized, to=x.dtype)
    return emit1(ctx, "Mul", normalized, scale)


def supported_op_types() -> set[str]:
    """Every ONNX op type the importer can import (table entries and rules)."""
    return set(MAPPINGS) | set(RULES) | {"Constant"}


from mdsl.frontends import (  # noqa: E402, F401  (register rules)
    onnx_attention,
    onnx_recurrent,
    onnx_sequences,
)
