"""The PyTorch -> mdsl op table: torch functions, Tensor methods and nn modules.

A handler takes the builder (`b`, see `torch_fx._Builder`) and the call's arguments as
PyTorch's signature names them; tensors arrive as mdsl Tensors when they come from the
graph inputs and as torch tensors when they are constants (parameters, buffers), which
`b.t(...)` turns into `Const` nodes named after them. Python values (ints from
`x.size(0)`, tuples of ints) arrive as they are: shapes are those of the example inputs.

Functions are keyed by name (`"linear"`, `"add"`, `"view"`): torch.fx gives
`call_function` targets (torch.add, operator.add, F.relu) and `call_method` names
("view"), PyTorch's function mode gives Tensor methods and functions; `torch_key`
reduces all of them to one name. nn modules that torch.fx keeps as leaves are mapped
to the same handlers with their parameters (`MODULES`).
"""

from __future__ import annotations

import math

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError

FUNCTIONS: dict = {}
# Calls whose result is a Python value computed from shapes: taken as traced.
SHAPE_QUERIES = frozenset({"size", "dim", "numel", "__get__", "__len__", "getattr", "ndimension"})
# Calls that turn tensor data into a Python value: control flow on them is traced statically.
DATA_DEPENDENT = frozenset(
    {"__bool__", "item", "__int__", "__float__", "__index__", "tolist", "__iter__"}
)
_OPERATOR_NAMES = {
    "truediv": "div",
    "floordiv": "floor_divide",
    "__truediv__": "div",
    "__floordiv__": "floor_divide",
    "__rtruediv__": "rdiv",
    "__rsub__": "rsub",
    "__radd__": "radd",
    "__rmul__": "rmul",
    "__rpow__": "rpow",
    "__rmatmul__": "rmatmul",
    # augmented assignment (x += y): the result is rebound to x
    **{
        f"{p}{op}{q}": base
        for op, base in (("iadd", "add"), ("isub", "sub"), ("imul", "mul"), ("itruediv", "div"))
        for p, q in (("", ""), ("__", "__"))
    },
}


def torch_key(target) -> str:
    """The table name of an fx target or a torch function ("add" for operator.add,
    torch.add, Tensor.add and Tensor.__add__)."""
    name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
    if name in _OPERATOR_NAMES:
        return _OPERATOR_NAMES[name]
    if name.startswith("__") and name.endswith("__") and name[2:-2] in _DUNDER_OPS:
        return name[2:-2]
    if name.startswith("_") and name.lstrip("_") in FUNCTIONS:
        return name.lstrip("_")
    return in_place_base(name) or name


def in_place_base(name: str) -> str | None:
    """The table call an in-place method stands for ("add" for "add_"), or None."""
    if name.endswith("_") and not name.startswith("_") and name[:-1] in FUNCTIONS:
        return name[:-1]
    return None


_DUNDER_OPS = {
    "add",
    "sub",
    "mul",
    "matmul",
    "pow",
    "neg",
    "getitem",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "and",
    "or",
    "abs",
    "mod",
}


def handles(*names: str):
    def register(fn):
        for name in names:
            FUNCTIONS[name] = fn
        return fn

    return register


# -- elementwise -------------------------------------------------------------------------
def _binary(op_type: str):
    def handler(b, input, other, *, out=None):
        return b.op(op_type, b.v(input), b.v(other))

    return handler


for _names, _op in (
    (("mul", "multiply"), "Mul"),
    (("matmul", "mm", "bmm"), "MatMul"),
    (("pow",), "Pow"),
    (("maximum",), "Max"),
    (("minimum",), "Min"),
    (("lt", "less"), "Less"),
    (("le", "less_equal"), "LessOrEqual"),
    (("gt", "greater"), "Greater"),
    (("ge", "greater_equal"), "GreaterOrEqual"),
    (("eq",), "Equal"),
    (("and", "logical_and"), "And"),
    (("or", "logical_or"), "Or"),
):
    handles(*_names)(_binary(_op))


@handles("add")
def add(b, input, other, *, alpha=1):
    if alpha != 1:
        other = b.op("Mul", b.v(other), alpha)
    return b.op("Add", b.v(input), b.v(other))


@handles("radd", "rmul")
def _reflected_commutative(b, input, other):
    return b.op("Add" if b.current_key == "radd" else "Mul", b.v(other), b.v(input))


@handles("sub", "subtract")
def sub(b, input, other, *, alpha=1):
    if alpha != 1:
        other = b.op("Mul", b.v(other), alpha)
    return b.op("Sub", b.v(input), b.v(other))


@handles("rsub")
def rsub(b, input, other, alpha=1):
    return sub(b, other, input, alpha=alpha)


@handles("div", "divide", "true_divide")
def div(b, input, other, *, rounding_mode=None):
    y = b.op("Div", b.v(input), b.v(other))
    if rounding_mode == "floor":
        return b.op("Floor", y)
    if rounding_mode == "trunc":
        return b.op("Mul", b.op("Sign", y), b.op("Floor", b.op("Abs", y)))
    return y


@handles("rdiv")
def rdiv(b, input, other):
    return b.op("Div", b.v(other), b.v(input))


@handles("floor_divide")
def floor_divide(b, input, other):
    return div(b, input, other, rounding_mode="floor")


@handles("ne")
def ne(b, input, other):
    return b.op("Not", b.op("Equal", b.v(input), b.v(other)))


@handles("where")
def where(b, condition, input, other):
    return b.op("Where", b.v(condition), b.v(input), b.v(other))


@handles("masked_fill")
def masked_fill(b, input, mask, value):
    return b.op("Where", b.v(mask), b.v(value), b.v(input))


def _unary(op_type: str):
    def handler(b, input, *, inplace=False, out=None):
        return b.op(op_type, b.v(input))

    return handler


for _names, _op in (
    (("relu",), "Relu"),
    (("sigmoid",), "Sigmoid"),
    (("tanh",), "Tanh"),
    (("silu",), "Silu"),
    (("exp",), "Exp"),
    (("log",), "Log"),
    (("sqrt",), "Sqrt"),
    (("rsqrt",), "Rsqrt"),
    (("neg", "negative"), "Neg"),
    (("abs",), "Abs"),
    (("erf",), "Erf"),
    (("sin",), "Sin"),
    (("cos",), "Cos"),
    (("reciprocal",), "Reciprocal"),
    (("floor",), "Floor"),
    (("ceil",), "Ceil"),
    (("round",), "Round"),
    (("sign",), "Sign"),
    (("hardswish",), "HardSwish"),
    (("logical_not", "bitwise_not"), "Not"),
    (("isnan",), "IsNaN"),
):
    handles(*_names)(_unary(_op))


@handles("contiguous", "clone", "detach")
def identity(b, input, *args, **kwargs):
    return b.v(input)


@handles("zeros_like", "ones_like", "full_like")
def filled_like(b, input, fill_value=None, *, dtype=None, **kwargs):
    """A constant of the input's (static) shape."""
    x = b.v(input)
    value = {"zeros_like": 0, "ones_like": 1}.get(b.current_key, fill_value)
    target = x.dtype if dtype is None else b.dtype(dtype)
    return b.const_array(np.full(tuple(x.shape), value, dtype=target.np), b.current_key)


@handles("gelu")
def gelu(b, input, approximate="none"):
    return b.op("Gelu", b.v(input), approximate=approximate)


@handles("hardsigmoid")
def hardsigmoid(b, input, inplace=False):
    return b.op("HardSigmoid", b.v(input), alpha=1 / 6, beta=0.5)


@handles("leaky_relu")
def leaky_relu(b, input, negative_slope=0.01, inplace=False):
    return b.op("LeakyRelu", b.v(input), alpha=negative_slope)


@handles("elu")
def elu(b, input, alpha=1.0, inplace=False):
    return b.op("Elu", b.v(input), alpha=alpha)


@handles("softplus")
def softplus(b, input, beta=1.0, threshold=20.0):
    if beta != 1:
        raise GraphError(f"softplus with beta={beta} (only beta=1 maps to ONNX Softplus)")
    return b.op("Softplus", b.v(input))


@handles("relu6")
def relu6(b, input, inplace=False):
    return b.op("Clip", b.v(input), 0.0, 6.0)


@handles("hardtanh")
def hardtanh(b, input, min_val=-1.0, max_val=1.0, inplace=False):
    return b.op("Clip", b.v(input), float(min_val), float(max_val))


@handles("clamp", "clip")
def clamp(b, input, min=None, max=None):
    x = b.v(input)
    bounds = [
        None if v is None else (b.v(v) if b.is_tensor(v) else _scalar_of(x, v)) for v in (min, max)
    ]
    return b.op("Clip", x, *bounds)


def _scalar_of(x, value):
    return np.array(value, dtype=x.dtype.np)


@handles("softmax", "log_softmax")
def softmax(b, input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        raise GraphError(f"{b.current_key} without dim is ambiguous; pass dim=")
    x = b.v(input)
    if dtype is not None:
        x = b.op("Cast", x, to=b.dtype(dtype))
    return b.op("Softmax" if b.current_key == "softmax" else "LogSoftmax", x, axis=dim)


@handles("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
def dropout(b, input, p=0.5, training=False, inplace=False):
    if training:
        raise GraphError("dropout in training mode; call module.eval() (mdsl imports inference)")
    return b.op("Dropout", b.v(input), ratio=float(p))


# -- nn --------------------------------------------------------------------------------
@handles("linear")
def linear(b, input, weight, bias=None):
    x, w = b.v(input), b.v(weight)
    c = None if bias is None else b.v(bias)
    if x.ndim == 2:
        return b.op("Gemm", x, w, c, transB=True)
    y = b.op("MatMul", x, b.op("Transpose", w, perm=(1, 0)))
    return y if c is None else b.op("Add", y, c)


@handles("conv1d", "conv2d", "conv3d")
def conv(b, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    x, w = b.v(input), b.v(weight)
    n = x.ndim - 2
    attrs = {"strides": _tuple(stride, n), "dilations": _tuple(dilation, n), "group": int(groups)}
    if isinstance(padding, str):
        attrs["auto_pad"] = {"same": "SAME_UPPER", "valid": "VALID"}[padding]
    else:
        pads = _tuple(padding, n)
        attrs["pads"] = pads + pads
    return b.op("Conv", x, w, None if bias is None else b.v(bias), **attrs)


@handles("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def conv_transpose(
    b, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    x, w = b.v(input), b.v(weight)
    n = x.ndim - 2
    pads = _tuple(padding, n)
    return b.op(
        "ConvTranspose", x, w, None if bias is None else b.v(bias),
        strides=_tuple(stride, n), pads=pads + pads, dilations=_tuple(dilation, n),
        group=int(groups), output_padding=_tuple(output_padding, n),
    )  # fmt: skip


def _tuple(value, n: int) -> tuple:
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return (int(value),) * n


@handles("batch_norm")
def batch_norm(
    b,
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training=False,
    momentum=0.1,
    eps=1e-5,
):
    if training:
        raise GraphError("batch_norm in training mode; call module.eval() (mdsl imports inference)")
    x = b.v(input)
    channels = x.shape[1]
    scale = (
        b.v(weight) if weight is not None else b.const_array(np.ones(channels, x.dtype.np), "ones")
    )
    shift = (
        b.v(bias) if bias is not None else b.const_array(np.zeros(channels, x.dtype.np), "zeros")
    )
    return b.op(
        "BatchNormalization",
        x,
        scale,
        shift,
        b.v(running_mean),
        b.v(running_var),
        epsilon=float(eps),
    )


@handles("layer_norm")
def layer_norm(b, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = b.v(input)
    shape = tuple(normalized_shape)
    scale = b.v(weight) if weight is not None else b.const_array(np.ones(shape, x.dtype.np), "ones")
    shift = None if bias is None else b.v(bias)
    return b.op("LayerNormalization", x, scale, shift, axis=-len(shape), epsilon=float(eps))


@handles("group_norm")
def group_norm(b, input, num_groups, weight=None, bias=None, eps=1e-5):
    x = b.v(input)
    channels = x.shape[1]
    scale = (
        b.v(weight) if weight is not None else b.const_array(np.ones(channels, x.dtype.np), "ones")
    )
    shift = (
        b.v(bias) if bias is not None else b.const_array(np.zeros(channels, x.dtype.np), "zeros")
    )
    return b.op(
        "GroupNormalization", x, scale, shift, num_groups=int(num_groups), epsilon=float(eps)
    )


@handles("embedding")
def embedding(b, input, weight, padding_idx=None, max_norm=None, *args, **kwargs):
    if max_norm is not None:
        raise GraphError("embedding with max_norm renormalizes its weights in place; not supported")
    return b.op("Gather", b.v(weight), b.v(input), axis=0)


@handles(
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices"
)
def max_pool(
    b, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    if return_indices:
        raise GraphError("max pooling with return_indices=True (mdsl's MaxPool gives values only)")
    x = b.v(input)
    n = x.ndim - 2
    kernel = _tuple(kernel_size, n)
    strides = kernel if stride is None or stride == [] else _tuple(stride, n)
    pads = _tuple(padding, n)
    return b.op(
        "MaxPool",
        x,
        kernel_shape=kernel,
        strides=strides,
        pads=pads + pads,
        dilations=_tuple(dilation, n),
        ceil_mode=bool(ceil_mode),
    )


@handles("avg_pool1d", "avg_pool2d", "avg_pool3d")
def avg_pool(
    b,
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    if divisor_override is not None:
        raise GraphError("average pooling with divisor_override")
    x = b.v(input)
    n = x.ndim - 2
    kernel = _tuple(kernel_size, n)
    strides = kernel if stride is None or stride == [] else _tuple(stride, n)
    pads = _tuple(padding, n)
    return b.op(
        "AveragePool",
        x,
        kernel_shape=kernel,
        strides=strides,
        pads=pads + pads,
        ceil_mode=bool(ceil_mode),
        count_include_pad=bool(count_include_pad),
    )


@handles("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool2d")
def adaptive_pool(b, input, output_size, return_indices=False):
    x = b.v(input)
    n = x.ndim - 2
    out = _tuple(output_size, n)
    spatial = x.shape[2:]
    is_max = b.current_key.startswith("adaptive_max")
    if all(o == 1 for o in out):
        return b.op("GlobalMaxPool" if is_max else "GlobalAveragePool", x)
    if not all(isinstance(d, int) and d % o == 0 for d, o in zip(spatial, out)):
        raise GraphError(
            f"adaptive pooling of {spatial} to {out} (only exact divisions map to ONNX)"
        )
    kernel = tuple(d // o for d, o in zip(spatial, out))
    return b.op("MaxPool" if is_max else "AveragePool", x, kernel_shape=kernel, strides=kernel)


@handles("scaled_dot_product_attention")
def scaled_dot_product_attention(
    b,
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    q, k, v = b.v(query), b.v(key), b.v(value)
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        k, v = (_repeat_heads(b, t, q.shape[-3]) for t in (k, v))
    factor = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    perm = (*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)
    scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", k, perm=perm)), float(factor))
    if is_causal:
        rows, cols = q.shape[-2], k.shape[-2]
        causal = np.tril(np.ones((rows, cols), dtype=bool))
        attn_mask = causal if attn_mask is None else attn_mask
    if attn_mask is not None:
        mask = b.v(attn_mask) if b.is_tensor(attn_mask) else b.const_array(attn_mask, "causal_mask")
        if mask.dtype == DType.bool_:
            blocked = np.array(-np.inf, dtype=scores.dtype.np)
            scores = b.op("Where", mask, scores, blocked)
        else:
            scores = b.op("Add", scores, mask)
    return b.op("MatMul", b.op("Softmax", scores, axis=-1), v)


def _repeat_heads(b, t, heads: int):
    """[..., kv_heads, S, D] -> [..., heads, S, D], each kv head serving heads/kv_heads
    query heads in turn (grouped-query attention)."""
    *lead, kv_heads, seq, size = t.shape
    if heads % kv_heads:
        raise GraphError(f"enable_gqa: {heads} query heads for {kv_heads} key/value heads")
    wide = b.op("Unsqueeze", t, axes=(len(lead) + 1,))
    wide = b.op("Expand", wide, shape=(*lead, kv_heads, heads // kv_heads, seq, size))
    return b.op("Reshape", wide, shape=(*lead, heads, seq, size))


@handles("multi_head_attention_forward")
def multi_head_attention(
    b, query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
    bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True,
    key_padding_mask=None, need_weights=True, attn_mask=None, use_separate_proj_weight=False,
    q_proj_weight=None, k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None,
    average_attn_weights=True, is_causal=False,
):  # fmt: skip
    """F.multi_head_attention_forward on (L, N, E) inputs (what nn.MultiheadAttention
    passes, after its batch_first transposes): projections, per-head scaled dot products
    with the masks, output projection."""
    if bias_k is not None or add_zero_attn or static_k is not None or static_v is not None:
        raise GraphError("multi-head attention with bias_k/bias_v, add_zero_attn or static k/v")
    q_in, k_in, v_in = b.v(query), b.v(key), b.v(value)
    if q_in.ndim != 3:
        raise GraphError("multi-head attention on unbatched (2-D) inputs")
    length, batch, embed = q_in.shape
    heads, head_dim = int(num_heads), embed // int(num_heads)
    weights = (q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight else None
    projected = []
    for i, x in enumerate((q_in, k_in, v_in)):
        w = b.v(weights[i]) if weights else _rows(b, b.v(in_proj_weight), i * embed, embed)
        bias = None if in_proj_bias is None else _rows(b, b.v(in_proj_bias), i * embed, embed)
        y = linear(b, x, w, bias)
        y = b.op("Reshape", y, shape=(x.shape[0], batch, heads, head_dim))
        projected.append(b.op("Transpose", y, perm=(1, 2, 0, 3)))  # (N, H, L, hd)
    q, k, v = projected
    k_t = b.op("Transpose", k, perm=(0, 1, 3, 2))
    scores = b.op("Mul", b.op("MatMul", q, k_t), float(1.0 / math.sqrt(head_dim)))
    scores = _mask_scores(b, scores, attn_mask, key_padding_mask, is_causal)
    probs = b.op("Softmax", scores, axis=-1)
    out = b.op("Transpose", b.op("MatMul", probs, v), perm=(2, 0, 1, 3))  # (L, N, H, hd)
    out = linear(b, b.op("Reshape", out, shape=(length, batch, embed)), b.v(out_proj_weight),
                 None if out_proj_bias is None else b.v(out_proj_bias))  # fmt: skip
    if not need_weights:
        return out, None
    if average_attn_weights:
        probs = b.op("ReduceMean", probs, axes=(1,), keepdims=False)
    return out, probs


def _rows(b, t, start: int, count: int):
    return b.op("Slice", t, starts=(start,), ends=(start + count,), axes=(0,))


def _mask_scores(b, scores, attn_mask, key_padding_mask, is_causal):
    """Masks of nn.MultiheadAttention: bool True (or -inf) marks a blocked position."""
    blocked = np.array(-np.inf, dtype=scores.dtype.np)
    if is_causal and attn_mask is None:
        rows, cols = scores.shape[-2:]
        attn_mask = ~np.tril(np.ones((rows, cols), dtype=bool))
    for mask, shape in ((attn_mask, None), (key_padding_mask, "padding")):
        if mask is None:
            continue
        m = b.v(mask) if b.is_tensor(mask) else b.const_array(mask, "mask")
        if shape == "padding":
            m = b.op("Reshape", m, shape=(m.shape[0], 1, 1, m.shape[1]))
        if m.dtype == DType.bool_:
            scores = b.op("Where", m, blocked, scores)
        else:
            scores = b.op("Add", scores, m)
    return scores


# -- reductions -----------------------------------------------------------------------------
def _reduce(op_type: str):
    def handler(b, input, dim=None, keepdim=False, *, dtype=None):
        x = b.v(input)
        if dtype is None and x.dtype == DType.bool_ and op_type in ("ReduceSum", "ReduceProd"):
            dtype = "int64"  # torch counts booleans in int64
        if dtype is not None:
            x = b.op("Cast", x, to=b.dtype(dtype))
        axes = None if dim is None else _axes(dim)
        return b.op(op_type, x, axes=axes, keepdims=bool(keepdim))

    return handler


def _axes(dim) -> tuple:
    return tuple(int(d) for d in dim) if isinstance(dim, (list, tuple)) else (int(dim),)


handles("sum")(_reduce("ReduceSum"))
handles("mean")(_reduce("ReduceMean"))
handles("amax")(_reduce("ReduceMax"))
handles("amin")(_reduce("ReduceMin"))
handles("prod")(_reduce("ReduceProd"))


@handles("max", "min")
def max_min(b, input, dim=None, keepdim=False, *, other=None):
    x = b.v(input)
    is_max = b.current_key == "max"
    if b.is_tensor(dim) or other is not None:  # torch.max(a, b): elementwise
        return b.op("Max" if is_max else "Min", x, b.v(other if other is not None else dim))
    if dim is None:
        return b.op("ReduceMax" if is_max else "ReduceMin", x, keepdims=False)
    values = b.op(
        "ReduceMax" if is_max else "ReduceMin", x, axes=(int(dim),), keepdims=bool(keepdim)
    )
    indices = b.op("ArgMax" if is_max else "ArgMin", x, axis=int(dim), keepdims=bool(keepdim))
    return values, indices


@handles("argmax", "argmin")
def argmax(b, input, dim=None, keepdim=False):
    x = b.v(input)
    if dim is None:
        x, dim = b.op("Reshape", x, shape=(-1,)), 0
    return b.op(
        "ArgMax" if b.current_key == "argmax" else "ArgMin",
        x,
        axis=int(dim),
        keepdims=bool(keepdim),
    )


# -- shapes ---------------------------------------------------------------------------------
def _shape_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


@handles("view", "reshape")
def view(b, input, *shape):
    return b.op("Reshape", b.v(input), shape=_shape_args(shape))


@handles("flatten")
def flatten(b, input, start_dim=0, end_dim=-1):
    x = b.v(input)
    if x.ndim == 0:
        return b.op("Reshape", x, shape=(1,))
    start, end = start_dim % x.ndim, end_dim % x.ndim
    shape = (*x.shape[:start], -1, *x.shape[end + 1 :])
    return b.op("Reshape", x, shape=shape)


@handles("permute")
def permute(b, input, *dims):
    return b.op("Transpose", b.v(input), perm=tuple(d % b.v(input).ndim for d in _shape_args(dims)))


@handles("transpose", "swapaxes")
def transpose(b, input, dim0, dim1):
    x = b.v(input)
    perm = list(range(x.ndim))
    a, c = dim0 % x.ndim, dim1 % x.ndim
    perm[a], perm[c] = perm[c], perm[a]
    return b.op("Transpose", x, perm=tuple(perm))


@handles("t")
def t(b, input):
    x = b.v(input)
    return x if x.ndim < 2 else b.op("Transpose", x, perm=(1, 0))


@handles("unsqueeze")
def unsqueeze(b, input, dim):
    return b.op("Unsqueeze", b.v(input), axes=(int(dim),))


@handles("squeeze")
def squeeze(b, input, dim=None):
    """torch leaves dims that are not 1 alone (ONNX Squeeze refuses them)."""
    x = b.v(input)
    axes = range(x.ndim) if dim is None else [a % x.ndim for a in _axes(dim)]
    ones = tuple(a for a in axes if x.shape[a] == 1)
    return b.op("Squeeze", x, axes=ones) if ones else b.op("Identity", x)


@handles("cat", "concat", "concatenate")
def cat(b, tensors, dim=0):
    parts = [b.v(t) for t in tensors]
    # torch (legacy rule) skips empty 1-D tensors, e.g. a key/value cache not yet filled
    kept = [t for t in parts if not (t.ndim == 1 and t.shape[0] == 0)] or parts
    if len(kept) == 1:
        return b.op("Identity", kept[0])
    return b.op("Concat", kept, axis=int(dim))


@handles("stack")
def stack(b, tensors, dim=0):
    parts = [b.op("Unsqueeze", b.v(t), axes=(int(dim),)) for t in tensors]
    return b.op("Concat", parts, axis=int(dim))


@handles("split")
def split(b, tensor, split_size_or_sections, dim=0):
    x = b.v(tensor)
    size = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sizes = tuple(min(step, size - i) for i in range(0, size, step))
    else:
        sizes = tuple(int(s) for s in split_size_or_sections)
    if len(sizes) == 1:
        return (b.op("Identity", x),)
    return tuple(b.op("Split", x, axis=int(dim), split=sizes))


@handles("chunk")
def chunk(b, input, chunks, dim=0):
    size = b.v(input).shape[dim]
    step = -(-size // int(chunks))
    return split(b, input, step, dim)


@handles("expand")
def expand(b, input, *sizes):
    x = b.v(input)
    sizes = _shape_args(sizes)
    offset = len(sizes) - x.ndim
    shape = tuple(x.shape[i - offset] if s == -1 else s for i, s in enumerate(sizes))
    return b.op("Expand", x, shape=shape)


@handles("expand_as")
def expand_as(b, input, other):
    return b.op("Expand", b.v(input), shape=b.v(other).shape)


@handles("repeat")
def repeat(b, input, *sizes):
    x = b.v(input)
    sizes = _shape_args(sizes)
    if len(sizes) > x.ndim:
        x = b.op("Reshape", x, shape=(1,) * (len(sizes) - x.ndim) + tuple(x.shape))
    return b.op("Tile", x, repeats=sizes)


@handles("to", "type", "float", "half", "double", "long", "int", "bool")
def to(b, input, *args, **kwargs):
    import torch

    x = b.v(input)
    named = {
        "float": torch.float32,
        "half": torch.float16,
        "double": torch.float64,
        "long": torch.int64,
        "int": torch.int32,
        "bool": torch.bool,
    }
    target = named.get(b.current_key)
    for value in (*args, kwargs.get("dtype")):
        if isinstance(value, torch.dtype):
            target = value
        elif b.is_tensor(value):
            target = b.torch_dtype_of(value)
    if target is None or b.dtype(target) == x.dtype:
        return x
    return b.op("Cast", x, to=b.dtype(target))


@handles("type_as")
def type_as(b, input, other):
    x, target = b.v(input), b.v(other).dtype
    return x if x.dtype == target else b.op("Cast", x, to=target)


@handles("getitem")
def getitem(b, input, index):
    """Basic indexing (ints, slices, None, Ellipsis) and one 1-D index tensor."""
    if not b.is_tensor(input):  # a tuple of tensors (split, max): Python indexing
        return input[index]
    x = b.v(input)
    index = index if isinstance(index, tuple) else (index,)
    if any(b.is_tensor(i) for i in index):
        return _gather_index(b, x, index)
    return _basic_index(b, x, index)


def _basic_index(b, x, index):
    count = sum(1 for i in index if i is not None and i is not Ellipsis)
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (x.ndim - count) + index[at + 1 :]
    starts, ends, axes, steps, squeezed, inserted = [], [], [], [], [], []
    axis = out_axis = 0
    for item in index:
        if item is None:
            inserted.append(out_axis)
            out_axis += 1
            continue
        if isinstance(item, slice):
            if item != slice(None):
                starts.append(0 if item.start is None else int(item.start))
                ends.append(2**62 if item.stop is None else int(item.stop))
                steps.append(1 if item.step is None else int(item.step))
                axes.append(axis)
            out_axis += 1
        else:
            starts.append(int(item))
            ends.append(int(item) + 1 if int(item) != -1 else 2**62)
            steps.append(1)
            axes.append(axis)
            squeezed.append(axis)
        axis += 1
    y = x
    if axes:
        y = b.op(
            "Slice", y, starts=tuple(starts), ends=tuple(ends), axes=tuple(axes), steps=tuple(steps)
        )
    if squeezed:
        y = b.op("Squeeze", y, axes=tuple(squeezed))
    if inserted:
        y = b.op("Unsqueeze", y, axes=tuple(inserted))
    return y if y is not x else b.op("Identity", x)


def _gather_index(b, x, index):
    """Advanced indexing: index tensors (and ints among them) on some axes, full slices
    on the others. One tensor is a Gather; several broadcast together into coordinate
    tuples for a GatherND over those axes moved to the front. As in torch, the indexed
    dims come out where the first index was when the indexed axes are adjacent, and
    first otherwise."""
    index = _expand_ellipsis(b, x, index)
    positions = [i for i, item in enumerate(index) if b.is_tensor(item) or isinstance(item, int)]
    if any(item != slice(None) for i, item in enumerate(index) if i not in positions):
        raise GraphError("tensor indexing mixed with partial slices or None is not supported")
    tensors = [index[i] for i in positions]
    if len(positions) == 1 and b.is_tensor(tensors[0]):
        return b.op(
            "Gather", x, _index_tensor(b, tensors[0], x.shape[positions[0]]), axis=positions[0]
        )
    rest = [a for a in range(x.ndim) if a not in positions]
    front = (
        x
        if positions == list(range(len(positions)))
        else b.op("Transpose", x, perm=(*positions, *rest))
    )
    coords = [_index_tensor(b, t, x.shape[a]) for t, a in zip(tensors, positions)]
    shape = _broadcast_shape([tuple(c.shape) for c in coords])
    stacked = [
        b.op("Unsqueeze", b.op("Expand", c, shape=shape), axes=(len(shape),)) for c in coords
    ]
    picked = b.op("GatherND", front, b.op("Concat", stacked, axis=len(shape)))
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    if not adjacent or positions[0] == 0:
        return picked
    n = len(shape)  # move the indexed dims to where the first index was
    perm = (*range(n, n + positions[0]), *range(n), *range(n + positions[0], picked.ndim))
    return b.op("Transpose", picked, perm=perm)


def _expand_ellipsis(b, x, index) -> tuple:
    if Ellipsis not in index:
        return tuple(index) + (slice(None),) * (x.ndim - len(index))
    at = index.index(Ellipsis)
    fill = (slice(None),) * (x.ndim - len(index) + 1)
    return tuple(index[:at]) + fill + tuple(index[at + 1 :])


def _index_tensor(b, item, size: int):
    """An index (tensor or int) as an int64 Tensor; bool masks are not supported."""
    t = b.v(item) if b.is_tensor(item) else b.const_array(np.array(item, np.int64), "index")
    if t.dtype == DType.bool_:
        raise GraphError("indexing with a boolean mask (a data-dependent shape) is not supported")
    return t if t.dtype == DType.int64 else b.op("Cast", t, to=DType.int64)


def _broadcast_shape(shapes: list[tuple]) -> tuple:
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + s for s in shapes]
    return tuple(max(dims) for dims in zip(*padded))


# -- nn modules torch.fx keeps as leaves -----------------------------------------------------
MODULES: dict = {}


def module_handler(*class_names: str):
    def register(fn):
        for name in class_names:
            MODULES[name] = fn
        return fn

    return register


def module_key(module) -> str | None:
    """The MODULES entry for `module`: its class or the nearest torch.nn base class."""
    for cls in type(module).__mro__:
        if cls.__name__ in MODULES and cls.__module__.startswith("torch.nn"):
            return cls.__name__
    return None


@module_handler("Linear")
def _linear_module(b, m, input):
    return linear(b, input, m.weight, m.bias)


@module_handler("Conv1d", "Conv2d", "Conv3d")
def _conv_module(b, m, input):
    if m.padding_mode != "zeros":
        raise GraphError(f"{type(m).__name__} with padding_mode={m.padding_mode!r}")
    return conv(b, input, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)


@module_handler("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
def _conv_transpose_module(b, m, input, output_size=None):
    if m.padding_mode != "zeros" or output_size is not None:
        raise GraphError(f"{type(m).__name__} with padding_mode or output_size")
    return conv_transpose(
        b, input, m.weight, m.bias, m.stride, m.padding, m.output_padding, m.groups, m.dilation
    )


@module_handler("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
def _batch_norm_module(b, m, input):
    if m.running_mean is None:
        raise GraphError(
            f"{type(m).__name__} without running statistics (track_running_stats=False)"
        )
    return batch_norm(
        b, input, m.running_mean, m.running_var, m.weight, m.bias, False, m.momentum, m.eps
    )


@module_handler("LayerNorm")
def _layer_norm_module(b, m, input):
    return layer_norm(b, input, m.normalized_shape, m.weight, m.bias, m.eps)


@module_handler("GroupNorm")
def _group_norm_module(b, m, input):
    return group_norm(b, input, m.num_groups, m.weight, m.bias, m.eps)


@module_handler("Embedding")
def _embedding_module(b, m, input):
    return embedding(b, input, m.weight, m.padding_idx, m.max_norm)


@module_handler("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout")
def _dropout_module(b, m, input):
    return dropout(b, input, m.p)


@module_handler("Identity")
def _identity_module(b, m, input, *args, **kwargs):
    return b.op("Identity", b.v(input))


@module_handler("Flatten")
def _flatten_module(b, m, input):
    return flatten(b, input, m.start_dim, m.end_dim)


@module_handler("Softmax", "LogSoftmax")
def _softmax_module(b, m, input):
    b.current_key = "softmax" if type(m).__name__ == "Softmax" else "log_softmax"
    return softmax(b, input, m.dim)


@module_handler("MaxPool1d", "MaxPool2d", "MaxPool3d")
def _max_pool_module(b, m, input):
    return max_pool(
        b, input, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, m.return_indices
    )


@module_handler("AvgPool1d", "AvgPool2d", "AvgPool3d")
def _avg_pool_module(b, m, input):
    return avg_pool(
        b,
        input,
        m.kernel_size,
        m.stride,
        m.padding,
        m.ceil_mode,
        m.count_include_pad,
        getattr(m, "divisor_override", None),
    )


@module_handler("AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool2d")
def _adaptive_module(b, m, input):
    b.current_key = "adaptive_max_pool2d" if "Max" in type(m).__name__ else "adaptive_avg_pool2d"
    return adaptive_pool(b, input, m.output_size)


def _activation_module(key: str, **params):
    def handler(b, m, input):
        b.current_key = key
        values = {name: getattr(m, attr) for name, attr in params.items()}
        return FUNCTIONS[key](b, input, **values)

    return handler


for _cls, _key, _params in (
    ("ReLU", "relu", {}),
    ("Sigmoid", "sigmoid", {}),
    ("Tanh", "tanh", {}),
    ("SiLU", "silu", {}),
    ("Hardswish", "hardswish", {}),
    ("Hardsigmoid", "hardsigmoid", {}),
    ("GELU", "gelu", {"approximate": "approximate"}),
    ("LeakyReLU", "leaky_relu", {"negative_slope": "negative_slope"}),
    ("ELU", "elu", {"alpha": "alpha"}),
    ("ReLU6", "relu6", {}),
    ("Hardtanh", "hardtanh", {"min_val": "min_val", "max_val": "max_val"}),
    ("Softplus", "softplus", {"beta": "beta", "threshold": "threshold"}),
):
    MODULES[_cls] = _activation_module(_key, **_params)


from mdsl.frontends import (  # noqa: E402, F401  (they register more calls and modules)
    torch_calls_transformers,
    torch_recurrent,
)
