"""Neural-network ops: convolution, pooling, normalization, softmax, Gemm, Dropout and
linear quantization (ONNX Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
BatchNormalization, LayerNormalization, InstanceNormalization, GroupNormalization,
Softmax, LogSoftmax, Gemm, Dropout, QuantizeLinear, DequantizeLinear).

Op types, attribute names and meanings are ONNX's; where mdsl keeps less (one output for
LayerNormalization and MaxPool, inference-only BatchNormalization and Dropout) the op's
docstring says so. ONNX's 0/1 integer flags (ceil_mode, transA, ...) are bool attrs here.
Inputs are channels-first (N, C, spatial...), as in ONNX.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.dtype import STORAGE, DType
from mdsl.ir.errors import DTypeError, GraphError
from mdsl.ir.format import Format
from mdsl.ir.graph import Tensor
from mdsl.ir.source import user_source
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.elementwise import add
from mdsl.ops.family import same_dtype
from mdsl.ops.linalg import matmul
from mdsl.ops.precision import computes_in_float32, widen
from mdsl.ops.proto import op_proto
from mdsl.ops.reductions import (
    Reduction,
    axis_attr,
    instance_norm_rule,
    layer_norm_rule,
    mean,
    reduce_rule,
    softmax_rule,
    spatial_axes,
    trailing_axes,
)
from mdsl.ops.registry import Attr, In, check
from mdsl.ops.scopes import scope
from mdsl.ops.shape_rules import broadcast_shapes, normalize_axis
from mdsl.ops.windows import (
    AUTO_PADS,
    Padding,
    output_shape,
    pad_spatial,
    padded_windows,
    window_of,
    window_values,
)

_WINDOW_ATTRS = {
    "auto_pad": Attr(str, default="NOTSET", choices=AUTO_PADS),
    "dilations": Attr([int], default=None),
    "pads": Attr([int], default=None),
    "strides": Attr([int], default=None),
}
_POOL_DTYPES = ["float", "int8", "uint8"]
_QUANTIZED = ["int8", "uint8", "int16", "uint16", *(d.value for d in sorted(STORAGE, key=str))]


def _channels_first(x: TensorType, op_type: str, least_rank: int) -> None:
    check(
        x.rank >= least_rank,
        f"{op_type} needs input of rank >= {least_rank} (N, C, ...), got shape {x.shape}",
    )
    check(
        x.format != Format.NHWC,
        f"{op_type} takes channels-first (N, C, ...) input; transpose the NHWC tensor first",
    )


def _spatial_format(x: TensorType) -> Format:
    return x.format if x.format == Format.NCHW else Format.ND


def _check_static(value, what: str) -> None:
    check(not isinstance(value, Dim), f"{what} must be static, got symbolic {value}")


def _check_vector(t: TensorType | None, length, what: str) -> None:
    if t is not None:
        check(t.shape == (length,), f"{what} must have shape ({length},), got {t.shape}")


# -- convolution -------------------------------------------------------------------------------
@op_proto(
    "Conv",
    inputs={"x": "float", "w": "float", "b": In("float", optional=True)},
    outputs={"y": "float"},
    attrs={
        **_WINDOW_ATTRS,
        "group": Attr(int, default=1),
        "kernel_shape": Attr([int], default=None),
    },
    category="extern",
)
def _conv_node(x, w, b, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """N-D convolution, ONNX Conv: x (N, C, D1...), w (M, C/group, k1...), b (M,)."""
    same_dtype("Conv", x, w, b)
    _channels_first(x, "Conv", 3)
    check(w.rank == x.rank, f"w must have rank {x.rank} like x, got shape {w.shape}")
    kernel = w.shape[2:]
    for k in kernel:
        _check_static(k, "Conv kernel size")
    if kernel_shape is not None:
        check(tuple(kernel_shape) == kernel, f"kernel_shape {kernel_shape} != w's {kernel}")
    check(isinstance(group, int) and group >= 1, f"group must be a positive int, got {group}")
    channels, out_channels = x.shape[1], w.shape[0]
    _check_static(channels, "Conv input channel count")
    _check_static(out_channels, "Conv output channel count")
    check(
        channels % group == 0 and out_channels % group == 0,
        f"group={group} must divide the input channels ({channels}) and output channels "
        f"({out_channels})",
    )
    check(
        channels == w.shape[1] * group,
        f"x has {channels} channels, w expects {w.shape[1]} per group x {group} groups",
    )
    _check_vector(b, out_channels, "Conv bias b")
    attrs = {"strides": strides, "dilations": dilations, "pads": pads, "auto_pad": auto_pad}
    out = output_shape(window_of(attrs, kernel), x.shape[2:])
    return TensorType((x.shape[0], out_channels, *out), x.dtype, _spatial_format(x))


def conv(
    x,
    w,
    b=None,
    *,
    strides=None,
    pads=None,
    dilations=None,
    group: int = 1,
    auto_pad: str = "NOTSET",
    kernel_shape=None,
    name: str | None = None,
) -> Tensor:
    """N-D convolution (ONNX Conv): x (N, C, D1, ...), w (M, C/group, k1, ...), optional
    bias b (M,). An int for strides/dilations applies to every spatial axis; pads may be an
    int, one value per axis (both sides) or ONNX's (begins..., ends...). auto_pad is
    "NOTSET", "SAME_UPPER", "SAME_LOWER" or "VALID".

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 4, 100))
    ...     y = mdsl.ops.conv(x, mdsl.param("w", (8, 4, 5)), strides=2, pads=2)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 8, 50)
    """
    n = _spatial_rank(w, "w", "Conv")
    return _conv_node(
        x,
        w,
        b,
        strides=_per_axis(strides, n),
        pads=_pads(pads, n),
        dilations=_per_axis(dilations, n),
        group=group,
        auto_pad=auto_pad,
        kernel_shape=kernel_shape,
        name=name,
    )


def conv2d(
    x,
    w,
    b=None,
    strides=1,
    pads=None,
    dilations=1,
    group: int = 1,
    *,
    auto_pad: str = "NOTSET",
    name: str | None = None,
) -> Tensor:
    """2-D convolution (ONNX Conv) of x (N, C, H, W) with w (M, C/group, kH, kW) and
    optional bias b (M,). Ints expand to both spatial axes; `pads=1` pads every side by 1,
    `pads=(1, 2)` pads H by 1 and W by 2 on both sides, 4 values are ONNX's
    (top, left, bottom, right).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 3, "H", "W"))
    ...     y = mdsl.ops.conv2d(x, mdsl.param("w", (16, 3, 3, 3)), strides=2, pads=1)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 16, Dim('(H+1)//2'), Dim('(W+1)//2'))
    """
    return _conv_node(
        x,
        w,
        b,
        strides=_per_axis(strides, 2),
        pads=_pads(pads, 2),
        dilations=_per_axis(dilations, 2),
        group=group,
        auto_pad=auto_pad,
        name=name,
    )


def _spatial_rank(t, what: str, op_type: str) -> int:
    """How many spatial axes `t` (N, C, spatial...) has: what ints expand to."""
    shape = getattr(t, "shape", None)
    if shape is None or len(shape) < 3:
        raise GraphError(
            f"{what} must be a tensor of rank >= 3 (N, C, spatial...), got {shape}",
            op_type=op_type,
            source=user_source(),
        )
    return len(shape) - 2


def _per_axis(value, n: int):
    """An int repeated for every spatial axis; a sequence passes (infer checks its length)."""
    if value is None:
        return None
    return (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)


def _pads(value, n: int):
    """pads as ONNX wants them: (begins..., ends...)."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return (value,) * (2 * n)
    value = tuple(value)
    return value * 2 if len(value) == n else value


@computes_in_float32
def _conv_ref(x, w, b=None, *, group, **attrs):
    window = window_of(attrs, w.shape[2:])
    windows, padding = padded_windows(x, window, 0)  # (N, C, K, *out)
    n, c = x.shape[:2]
    m = w.shape[0]
    cols = windows.reshape(n, group, c // group, windows.shape[2], -1)
    kernels = w.reshape(group, m // group, c // group, -1).astype(cols.dtype)
    y = np.einsum("ngckp,gmck->ngmp", cols, kernels, optimize=True)
    y = y.reshape(n, m, *padding.out)
    if b is not None:
        y = y + b.reshape(m, *(1,) * window.rank)
    return y.astype(x.dtype)


# -- pooling -----------------------------------------------------------------------------------
def _pool_infer(op_type: str, x, **attrs):
    _channels_first(x, op_type, 3)
    kernel_shape = attrs["kernel_shape"]
    check(
        len(kernel_shape) == x.rank - 2,
        f"kernel_shape {tuple(kernel_shape)} needs {x.rank - 2} entries for input {x.shape}",
    )
    window = window_of(attrs)
    n = window.rank
    for i in range(n):
        # ONNX Runtime and PyTorch refuse pads a window could lie entirely inside
        check(
            window.pads[i] < window.kernel[i] and window.pads[n + i] < window.kernel[i],
            f"pads {window.pads} must be smaller than kernel_shape {window.kernel}",
        )
    out = output_shape(window, x.shape[2:])
    return TensorType((*x.shape[:2], *out), x.dtype, _spatial_format(x))


_POOL_ATTRS = {
    **_WINDOW_ATTRS,
    "ceil_mode": Attr(bool, default=False),
    "kernel_shape": Attr([int]),
}


@op_proto(
    "MaxPool",
    inputs={"x": _POOL_DTYPES},
    outputs={"y": _POOL_DTYPES},
    attrs=_POOL_ATTRS,
    category="opaque",
)
def _max_pool_node(x, **attrs):
    """Max over sliding windows (ONNX MaxPool; only the values, not ONNX's optional
    Indices output, hence no storage_order attr)."""
    return _pool_infer("MaxPool", x, **attrs)


@op_proto(
    "AveragePool",
    inputs={"x": "float"},
    outputs={"y": "float"},
    attrs={**_POOL_ATTRS, "count_include_pad": Attr(bool, default=False)},
    category="opaque",
)
def _average_pool_node(x, *, count_include_pad, **attrs):
    """Mean over sliding windows (ONNX AveragePool)."""
    return _pool_infer("AveragePool", x, **attrs)


def max_pool(
    x,
    kernel_shape,
    strides=None,
    pads=None,
    dilations=None,
    ceil_mode: bool = False,
    *,
    auto_pad: str = "NOTSET",
    name: str | None = None,
) -> Tensor:
    """Max pooling over the spatial axes of x (N, C, D1, ...) (ONNX MaxPool). Ints expand
    to every spatial axis; strides default to 1 (ONNX), not to the kernel size. pads as in
    `conv`. With `ceil_mode` a last partial window counts unless it starts in the padding.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.max_pool(g.input("x", ("N", 64, 112, 112)), 3, strides=2, pads=1)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 64, 56, 56)
    """
    n = _spatial_rank(x, "x", "MaxPool")
    return _max_pool_node(
        x, name=name, **_pool_attrs(n, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)
    )


def average_pool(
    x,
    kernel_shape,
    strides=None,
    pads=None,
    dilations=None,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
    *,
    auto_pad: str = "NOTSET",
    name: str | None = None,
) -> Tensor:
    """Average pooling over the spatial axes of x (N, C, D1, ...) (ONNX AveragePool).
    Arguments as in `max_pool`; `count_include_pad` divides by the window size including
    explicit padding (never including a ceil_mode window's overhang past it).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.average_pool(g.input("x", (1, 1, 4)), 2, strides=2), "y")
    >>> mdsl.interpret(g, {"x": np.arange(4, dtype=np.float32).reshape(1, 1, 4)})["y"]
    array([[[0.5, 2.5]]], dtype=float32)
    """
    n = _spatial_rank(x, "x", "AveragePool")
    attrs = _pool_attrs(n, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)
    return _average_pool_node(x, count_include_pad=count_include_pad, name=name, **attrs)


def _pool_attrs(n, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad) -> dict:
    return {
        "kernel_shape": _per_axis(kernel_shape, n),
        "strides": _per_axis(strides, n),
        "pads": _pads(pads, n),
        "dilations": _per_axis(dilations, n),
        "ceil_mode": ceil_mode,
        "auto_pad": auto_pad,
    }


def _max_pool_ref(x, **attrs):
    lowest = -np.inf if np.issubdtype(widen(x).dtype, np.floating) else np.iinfo(x.dtype).min
    windows, _ = padded_windows(x, window_of(attrs), lowest)
    return windows.max(axis=2)


@computes_in_float32
def _average_pool_ref(x, *, count_include_pad, **attrs):
    window = window_of(attrs)
    windows, padding = padded_windows(x, window, 0)
    counted = _counted_positions(x.shape[2:], padding, count_include_pad)
    counts = window_values(counted, window, padding.out).sum(axis=0)
    return (windows.sum(axis=2) / counts).astype(x.dtype)


def _counted_positions(in_dims, padding: Padding, count_include_pad: bool) -> np.ndarray:
    """Over the padded input: 1 where a position counts towards a window's divisor."""
    ones = np.ones(in_dims)
    if count_include_pad:
        with_pads = pad_spatial(ones, padding.begins, padding.ends, 1)
        return pad_spatial(with_pads, (0,) * len(in_dims), padding.overhang, 0)
    ends = tuple(e + o for e, o in zip(padding.ends, padding.overhang))
    return pad_spatial(ones, padding.begins, ends, 0)


def _global_pool_infer(op_type: str, x: TensorType) -> TensorType:
    _channels_first(x, op_type, 3)
    return TensorType((*x.shape[:2], *(1,) * (x.rank - 2)), x.dtype, _spatial_format(x))


@op_proto(
    "GlobalAveragePool",
    inputs={"x": "float"},
    outputs={"y": "float"},
    category="reduction",
    reduction=Reduction(spatial_axes, reduce_rule("sum", post=mean)),
)
def global_average_pool(x):
    """Mean over every spatial axis of x (N, C, D1, ...), kept as size-1 axes (ONNX
    GlobalAveragePool).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.global_average_pool(g.input("x", ("N", 512, "H", "W")))
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 512, 1, 1)
    """
    return _global_pool_infer("GlobalAveragePool", x)


@op_proto(
    "GlobalMaxPool",
    inputs={"x": _POOL_DTYPES},
    outputs={"y": _POOL_DTYPES},
    category="reduction",
    reduction=Reduction(spatial_axes, reduce_rule("max")),
)
def global_max_pool(x):
    """Maximum over every spatial axis of x (N, C, D1, ...), kept as size-1 axes (ONNX
    GlobalMaxPool).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.global_max_pool(g.input("x", (2, 8, 7))), "y")
    >>> g.outputs["y"].shape
    (2, 8, 1)
    """
    return _global_pool_infer("GlobalMaxPool", x)


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@computes_in_float32
def _global_average_pool_ref(x):
    return x.mean(axis=_spatial_axes(x), keepdims=True).astype(x.dtype)


# -- normalization -----------------------------------------------------------------------------
@op_proto(
    "BatchNormalization",
    inputs={"x": "float", "scale": "float", "bias": "float", "mean": "float", "var": "float"},
    outputs={"y": "float"},
    attrs={
        "epsilon": Attr(float, default=1e-5),
        "momentum": Attr(float, default=0.9, doc="training only; unused"),
        "training_mode": Attr(bool, default=False),
    },
    category="pointwise",
)
def batch_norm(x, scale, bias, mean, var, *, epsilon, momentum, training_mode):
    """Inference batch normalization over the channel axis 1 of x (N, C, ...) (ONNX
    BatchNormalization): (x - mean) / sqrt(var + epsilon) * scale + bias, every
    parameter of shape (C,). Only inference: training_mode=True is refused, and the
    optional running_mean/running_var outputs are not produced. Parameters may have
    another float dtype than x (mixed precision); the output has x's.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 8, 5, 5))
    ...     gamma, beta, mean, var = (mdsl.param(n, (8,)) for n in ("g", "b", "m", "v"))
    ...     y = mdsl.ops.batch_norm(x, gamma, beta, mean, var, epsilon=1e-3)
    ...     g.output(y, "y")
    >>> y.producer.op_type, y.shape
    ('BatchNormalization', (Dim('N'), 8, 5, 5))
    """
    check(not training_mode, "training_mode=True is not supported (inference only)", GraphError)
    _channels_first(x, "BatchNormalization", 2)
    same_dtype("BatchNormalization", scale, bias)
    same_dtype("BatchNormalization", mean, var)
    for what, t in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        _check_vector(t, x.shape[1], f"BatchNormalization {what}")
    return TensorType(x.shape, x.dtype, _spatial_format(x))


def _per_channel(param: np.ndarray, ndim: int) -> np.ndarray:
    return param.reshape(-1, *(1,) * (ndim - 2))


def _batch_norm_ref(x, scale, bias, mean, var, *, epsilon, momentum, training_mode):
    xf, scale, bias, mean, var = (_compute_float(a) for a in (x, scale, bias, mean, var))
    inv_std = 1.0 / np.sqrt(_per_channel(var, x.ndim) + epsilon)
    y = (xf - _per_channel(mean, x.ndim)) * inv_std * _per_channel(scale, x.ndim)
    return (y + _per_channel(bias, x.ndim)).astype(x.dtype)


def _compute_float(a: np.ndarray) -> np.ndarray:
    """float64 stays float64; every other float computes in float32."""
    return a if a.dtype == np.float64 else a.astype(np.float32)


def _normalize(x: np.ndarray, axes: tuple, epsilon: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    return centered / np.sqrt(var + epsilon)


@op_proto(
    "LayerNormalization",
    inputs={"x": "float", "scale": "float", "bias": In("float", optional=True)},
    outputs={"y": "float"},
    attrs={"axis": Attr(int, default=-1), "epsilon": Attr(float, default=1e-5)},
    category="reduction",
    reduction=Reduction(trailing_axes, layer_norm_rule, per_element=True),
)
def layer_norm(x, scale, bias, *, axis, epsilon):
    """Normalize x over its axes from `axis` on, then scale and shift (ONNX
    LayerNormalization). scale and bias broadcast to x.shape[axis:]. Statistics are
    computed in float32 (ONNX stash_type=1). Only the output Y is produced, not ONNX's
    optional Mean and InvStdDev (training-only).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("B", "T", 4))
    ...     y = mdsl.ops.layer_norm(x, mdsl.param("gamma", (4,), init="ones"),
    ...                             mdsl.param("beta", (4,), init="zeros"))
    ...     g.output(y, "y")
    >>> out = mdsl.interpret(g, {"x": np.array([[[1, 2, 3, 4]]], np.float32)})["y"]
    >>> np.round(out, 3)
    array([[[-1.342, -0.447,  0.447,  1.342]]], dtype=float32)
    """
    same_dtype("LayerNormalization", x, scale, bias)
    axis = normalize_axis(axis, x.rank)
    normalized = x.shape[axis:]
    for what, t in (("scale", scale), ("bias", bias)):
        if t is not None:
            check(
                t.rank <= len(normalized) and broadcast_shapes(normalized, t.shape) == normalized,
                f"LayerNormalization {what} of shape {t.shape} must broadcast to the "
                f"normalized shape {normalized}",
            )
    return TensorType(x.shape, x.dtype, x.format)


def _layer_norm_ref(x, scale, bias=None, *, axis, epsilon):
    axes = tuple(range(axis % x.ndim, x.ndim))
    y = _normalize(_compute_float(x), axes, epsilon) * _compute_float(scale)
    if bias is not None:
        y = y + _compute_float(bias)
    return y.astype(x.dtype)


@op_proto(
    "InstanceNormalization",
    inputs={"x": "float", "scale": "float", "bias": "float"},
    outputs={"y": "float"},
    attrs={"epsilon": Attr(float, default=1e-5)},
    category="reduction",
    reduction=Reduction(spatial_axes, instance_norm_rule, per_element=True),
)
def instance_norm(x, scale, bias, *, epsilon):
    """Normalize each (sample, channel) of x (N, C, D1, ...) over its spatial axes, then
    scale and shift per channel (ONNX InstanceNormalization; scale and bias (C,)).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 3, "H", "W"))
    ...     y = mdsl.ops.instance_norm(x, mdsl.param("s", (3,)), mdsl.param("b", (3,)))
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 3, Dim('H'), Dim('W'))
    """
    same_dtype("InstanceNormalization", x, scale, bias)
    _channels_first(x, "InstanceNormalization", 3)
    _check_vector(scale, x.shape[1], "InstanceNormalization scale")
    _check_vector(bias, x.shape[1], "InstanceNormalization bias")
    return TensorType(x.shape, x.dtype, _spatial_format(x))


def _instance_norm_ref(x, scale, bias, *, epsilon):
    y = _normalize(_compute_float(x), _spatial_axes(x), epsilon)
    y = y * _per_channel(_compute_float(scale), x.ndim) + _per_channel(_compute_float(bias), x.ndim)
    return y.astype(x.dtype)


@op_proto(
    "GroupNormalization",
    inputs={"x": "float", "scale": "float", "bias": "float"},
    outputs={"y": "float"},
    attrs={"epsilon": Attr(float, default=1e-5), "num_groups": Attr(int)},
    category="reduction",
)
def group_norm(x, scale, bias, *, epsilon, num_groups):
    """Normalize x (N, C, D1, ...) over groups of C / num_groups channels and the spatial
    axes, then scale and shift per channel (ONNX GroupNormalization, opset 21: scale and
    bias have shape (C,)).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 32, 8, 8))
    ...     y = mdsl.ops.group_norm(x, mdsl.param("s", (32,)), mdsl.param("b", (32,)),
    ...                             num_groups=8)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 32, 8, 8)
    """
    same_dtype("GroupNormalization", x, scale, bias)
    _channels_first(x, "GroupNormalization", 2)
    channels = x.shape[1]
    check(
        isinstance(num_groups, int)
        and num_groups >= 1
        and isinstance(channels, int)
        and channels % num_groups == 0,
        f"num_groups={num_groups} must divide the channel count {channels}",
    )
    _check_vector(scale, channels, "GroupNormalization scale")
    _check_vector(bias, channels, "GroupNormalization bias")
    return TensorType(x.shape, x.dtype, _spatial_format(x))


def _group_norm_ref(x, scale, bias, *, epsilon, num_groups):
    grouped = _compute_float(x).reshape(x.shape[0], num_groups, -1)
    y = _normalize(grouped, (2,), epsilon).reshape(x.shape)
    y = y * _per_channel(_compute_float(scale), x.ndim) + _per_channel(_compute_float(bias), x.ndim)
    return y.astype(x.dtype)


# -- softmax -----------------------------------------------------------------------------------
def _softmax_family(op_type: str, doc: str):
    def infer(x, *, axis):
        normalize_axis(axis, x.rank)
        return TensorType(x.shape, x.dtype, x.format)

    infer.__doc__ = doc
    infer.__name__ = infer.__qualname__ = "softmax" if op_type == "Softmax" else "log_softmax"
    return op_proto(
        op_type,
        inputs={"x": "float"},
        outputs={"y": "float"},
        attrs={"axis": Attr(int, default=-1)},
        category="reduction",
        reduction=Reduction(axis_attr, softmax_rule(log=op_type == "LogSoftmax"), per_element=True),
    )(infer)


softmax = _softmax_family(
    "Softmax",
    """exp(x) / sum(exp(x)) along `axis` (ONNX Softmax, opset 13: one axis, default -1).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.softmax(g.input("x", ("B", 2)), axis=-1), "y")
    >>> mdsl.interpret(g, {"x": np.array([[0.0, 0.0], [0.0, 1000.0]], np.float32)})["y"]
    array([[0.5, 0.5],
           [0. , 1. ]], dtype=float32)
    """,
)
log_softmax = _softmax_family(
    "LogSoftmax",
    """log(softmax(x)) along `axis`, computed without overflow (ONNX LogSoftmax, opset 13).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.log_softmax(g.input("x", (2,))), "y")
    >>> mdsl.interpret(g, {"x": np.array([0.0, 0.0], np.float32)})["y"]
    array([-0.6931472, -0.6931472], dtype=float32)
    """,
)


@computes_in_float32
def _softmax_ref(x, *, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@computes_in_float32
def _log_softmax_ref(x, *, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


# -- Gemm and linear ---------------------------------------------------------------------------
@op_proto(
    "Gemm",
    inputs={
        "a": ["float", "int32", "int64"],
        "b": ["float", "int32", "int64"],
        "c": In(["float", "int32", "int64"], optional=True),
    },
    outputs={"y": ["float", "int32", "int64"]},
    attrs={
        "alpha": Attr(float, default=1.0),
        "beta": Attr(float, default=1.0),
        "transA": Attr(bool, default=False),
        "transB": Attr(bool, default=False),
    },
    category="extern",
)
def gemm(a, b, c, *, alpha, beta, transA, transB):
    """alpha * A' @ B' + beta * C for 2-D A and B, A' = A.T if transA, B' = B.T if
    transB; C broadcasts to (M, N) (ONNX Gemm).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 768))
    ...     w = mdsl.param("w", (3072, 768))      # PyTorch's (out, in) layout
    ...     y = mdsl.ops.gemm(x, w, mdsl.param("b", (3072,)), transB=True)
    ...     g.output(y, "y")
    >>> y.shape
    (Dim('N'), 3072)
    """
    same_dtype("Gemm", a, b, c)
    check(a.rank == 2 and b.rank == 2, f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    m, k = a.shape[::-1] if transA else a.shape
    k2, n = b.shape[::-1] if transB else b.shape
    check(k == k2, f"K of A ({k}) != K of B ({k2}) (transA={transA}, transB={transB})")
    if c is not None:
        check(
            c.rank <= 2 and broadcast_shapes((m, n), c.shape) == (m, n),
            f"Gemm C of shape {c.shape} must broadcast to ({m}, {n})",
        )
    return TensorType((m, n), a.dtype)


@computes_in_float32
def _gemm_ref(a, b, c=None, *, alpha, beta, transA, transB):
    y = (a.T if transA else a) @ (b.T if transB else b)
    if alpha != 1.0:
        y = alpha * y
    if c is not None:
        y = y + (c if beta == 1.0 else beta * c)
    return y.astype(a.dtype)


def linear(x, weight, bias=None, *, name: str | None = None) -> Tensor:
    """x @ weight + bias over the last axis of x (any rank, leading dims may be symbolic).
    `weight` has shape (in, out) — transpose PyTorch's (out, in) weights. Records a MatMul
    and, with a bias, an Add (one graph pattern for every rank, which the fusion passes
    turn into one GEMM with a bias epilogue); with `name`, both sit in scope `name`.
    For the single ONNX Gemm node of a 2-D product use `gemm`.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("B", "T", 768))
    ...     y = mdsl.ops.linear(x, mdsl.param("w", (768, 64)), mdsl.param("b", (64,)),
    ...                         name="proj")
    ...     g.output(y, "y")
    >>> y.shape, [n.name for n in g.nodes if n.op_type in ("MatMul", "Add")]
    ((Dim('B'), Dim('T'), 64), ['proj/MatMul', 'proj/Add'])
    """
    if name is not None:
        with scope(name):
            return linear(x, weight, bias)
    y = matmul(x, weight)
    return y if bias is None else add(y, bias)


# -- Dropout -----------------------------------------------------------------------------------
@op_proto(
    "Dropout",
    inputs={"x": "float"},
    outputs={"y": "float"},
    attrs={"ratio": Attr(float, default=0.5), "seed": Attr(int, default=None)},
    category="data_movement",
)
def dropout(x, *, ratio, seed):
    """Inference dropout: the identity (ONNX Dropout with training_mode false). The ratio,
    an optional input in ONNX, is an attribute here (inference never reads it); the
    optional mask output is not produced.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.dropout(g.input("x", ("N", 16)), ratio=0.1)
    ...     g.output(y, "y")
    >>> y.producer.op_type, y.shape
    ('Dropout', (Dim('N'), 16))
    """
    check(0.0 <= ratio < 1.0, f"Dropout ratio must be in [0, 1), got {ratio}", GraphError)
    return x


# -- linear quantization -----------------------------------------------------------------------
def _quant_param_shape(x: TensorType, scale: TensorType, zero_point, axis: int, op: str):
    """Check scale/zero_point: a scalar (per tensor) or 1-D of x.shape[axis] (per axis)."""
    if zero_point is not None:
        check(
            zero_point.shape == scale.shape or zero_point.numel == scale.numel == 1,
            f"{op} zero point shape {zero_point.shape} != scale shape {scale.shape}",
        )
    if scale.numel == 1:
        return
    check(scale.rank == 1, f"{op} scale must be a scalar or 1-D, got shape {scale.shape}")
    axis = normalize_axis(axis, x.rank)
    check(
        scale.shape[0] == x.shape[axis],
        f"{op} per-axis scale has {scale.shape[0]} entries, axis {axis} of x has {x.shape[axis]}",
    )


@op_proto(
    "QuantizeLinear",
    inputs={"x": ["float", "int32"], "scale": "float", "zero_point": In(_QUANTIZED, optional=True)},
    outputs={"y": _QUANTIZED},
    attrs={
        "axis": Attr(int, default=1),
        "output_dtype": Attr(DType, default=None),
        "saturate": Attr(int, default=1, choices=(0, 1)),
    },
    category="pointwise",
)
def quantize_linear(x, scale, zero_point, *, axis, output_dtype, saturate):
    """saturate(round(x / scale) + zero_point), rounding halves to even (ONNX
    QuantizeLinear). scale and zero_point are scalars (per tensor) or 1-D along `axis`
    (per axis). The output dtype is zero_point's, else `output_dtype`, else uint8. A
    float8 output is not rounded; with `saturate=0` a value beyond its range becomes
    inf (or NaN for the types without inf) instead of the largest finite value.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (4,))
    ...     scale = g.const("scale", np.float32(0.5))
    ...     g.output(mdsl.ops.quantize_linear(x, scale, output_dtype="int8"), "q")
    >>> mdsl.interpret(g, {"x": np.array([0.25, 0.75, -1.0, 100.0], np.float32)})["q"]
    array([  0,   2,  -2, 127], dtype=int8)
    """
    _quant_param_shape(x, scale, zero_point, axis, "QuantizeLinear")
    dtype = zero_point.dtype if zero_point is not None else (output_dtype or DType.uint8)
    check(
        output_dtype is None or output_dtype == dtype,
        f"output_dtype {output_dtype} disagrees with the zero point's dtype {dtype}",
        DTypeError,
    )
    return TensorType(x.shape, dtype, x.format)


def _broadcast_param(param: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A per-tensor or per-axis parameter shaped to broadcast against an ndim-array."""
    if param.size == 1:
        return param.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = param.size
    return param.reshape(shape)


def _quantize_ref(x, scale, zero_point=None, *, axis, output_dtype, saturate=1):
    dtype = zero_point.dtype if zero_point is not None else (output_dtype or DType.uint8).np
    compute = np.float64 if np.float64 in (x.dtype, scale.dtype) else np.float32
    scaled = x.astype(compute) / _broadcast_param(scale, x.ndim, axis).astype(compute)
    q = np.rint(scaled).astype(np.float64)  # np.rint rounds halves to even
    if zero_point is not None:
        q = q + _broadcast_param(zero_point, x.ndim, axis)
    if DType.of(dtype).is_storage and not _is_integral(dtype):  # float8/float4: no rounding
        q = scaled.astype(np.float64)
        q = q if zero_point is None else q + _broadcast_param(zero_point, x.ndim, axis)
        if saturate:  # to the finite range; else as the conversion rounds (inf or NaN)
            limit = float(ml_dtypes.finfo(dtype).max)
            q = np.clip(q, -limit, limit)
        return q.astype(np.float32).astype(dtype)
    limits = ml_dtypes.iinfo(dtype)
    return np.clip(q, limits.min, limits.max).astype(dtype)


def _is_integral(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" or dtype.name.startswith(("int", "uint"))


@op_proto(
    "DequantizeLinear",
    inputs={
        "x": [*_QUANTIZED, "int32"],
        "scale": "float",
        "zero_point": In([*_QUANTIZED, "int32"], optional=True),
    },
    outputs={"y": "float"},
    attrs={"axis": Attr(int, default=1)},
    category="pointwise",
)
def dequantize_linear(x, scale, zero_point, *, axis):
    """(x - zero_point) * scale, in scale's dtype (ONNX DequantizeLinear). scale and
    zero_point are scalars (per tensor) or 1-D along `axis` (per axis); zero_point has x's
    dtype.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     q = g.input("q", (3,), "uint8")
    ...     scale = g.const("scale", np.float32(0.5))
    ...     zero = g.const("zero", np.uint8(128))
    ...     g.output(mdsl.ops.dequantize_linear(q, scale, zero), "x")
    >>> mdsl.interpret(g, {"q": np.array([0, 128, 255], np.uint8)})["x"]
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    same_dtype("DequantizeLinear", x, zero_point)
    _quant_param_shape(x, scale, zero_point, axis, "DequantizeLinear")
    return TensorType(x.shape, scale.dtype, x.format)


def _dequantize_ref(x, scale, zero_point=None, *, axis):
    wide = np.int64 if _is_integral(x.dtype) else np.float64  # float8/float4 stay floats
    q = x.astype(wide)
    if zero_point is not None:
        q = q - _broadcast_param(zero_point, x.ndim, axis).astype(wide)
    compute = np.float64 if scale.dtype == np.float64 else np.float32
    y = q.astype(compute) * _broadcast_param(scale, x.ndim, axis).astype(compute)
    return y.astype(scale.dtype)


register_op_impl("Conv", _conv_ref)
register_op_impl("MaxPool", _max_pool_ref)
register_op_impl("AveragePool", _average_pool_ref)
register_op_impl("GlobalAveragePool", _global_average_pool_ref)
register_op_impl("GlobalMaxPool", lambda x: x.max(axis=_spatial_axes(x), keepdims=True))
register_op_impl("BatchNormalization", _batch_norm_ref)
register_op_impl("LayerNormalization", _layer_norm_ref)
register_op_impl("InstanceNormalization", _instance_norm_ref)
register_op_impl("GroupNormalization", _group_norm_ref)
register_op_impl("Softmax", _softmax_ref)
register_op_impl("LogSoftmax", _log_softmax_ref)
register_op_impl("Gemm", _gemm_ref)
register_op_impl("Dropout", lambda x, *, ratio, seed: x.copy())
register_op_impl("QuantizeLinear", _quantize_ref)
register_op_impl("DequantizeLinear", _dequantize_ref)
