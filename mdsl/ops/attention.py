"""Scaled dot-product attention with ONNX's Attention semantics (opsets 23 to 25).

Q, K and V are 4-D, `(batch, heads, sequence, head size)`, or 3-D, `(batch, sequence,
heads * head size)` with `q_num_heads` and `kv_num_heads` saying how many heads the
hidden axis holds. Grouped-query attention: `kv_num_heads` may divide `q_num_heads`,
each K/V head then serving `q_num_heads / kv_num_heads` query heads in a row (ONNX's
interleaved repeat). With `past_key`/`past_value` (4-D caches) the new keys and values
are appended along the sequence axis; `present_key`/`present_value` return the
concatenation.

The scores are `(Q * sqrt(scale)) @ (K * sqrt(scale))ᵀ` (`scale` 0: 1 / sqrt(head
size)), then `softcap * tanh(scores / softcap)` when `softcap` > 0, plus an additive
bias: `attn_mask` (bool: False blocks a key; or float, added), padded with blocked keys
when shorter than the keys; `is_causal` blocks a key past the query (bottom-right
aligned: a query attends its key and the cache before it); `left_window_size` /
`right_window_size` (-1: unbounded) block keys outside a sliding window; per-batch
`nonpad_kv_seqlen` blocks the padding of an external cache. The softmax (in
`softmax_precision` when given) of a row whose every key is blocked is all zero, and so is
its output. `qk_matmul_output_mode` picks the fourth output: 0 or 1 the scores (after the
softcap), 2 the scores plus the bias, 3 the softmax.

The numpy reference computes each step in the inputs' dtype, as ONNX's reference does
(half floats round after every step, products accumulate in float32); compiled targets
run the `lower_attention` pass's rewrite into MatMul, Softmax and pointwise ops instead.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, In, check
from mdsl.ops.shape_rules import broadcast_shapes, unify_dims

FLOATS = ["float16", "bfloat16", "float32", "float64"]
QK_OUTPUT_MODES = (0, 1, 2, 3)


def attention_geometry(q, k, v, *, q_num_heads: int, kv_num_heads: int) -> dict:
    """The sizes of an attention of Q, K, V (shapes): batch, query and key/value heads,
    query and key lengths, head sizes of Q/K and V, and whether the inputs are 3-D."""
    check(len(q) == len(k) == len(v), f"Q, K and V must have one rank, got {q}, {k}, {v}")
    check(len(q) in (3, 4), f"Attention takes 3-D or 4-D Q, K, V, got rank {len(q)}")
    if len(q) == 4:
        check(
            not q_num_heads and not kv_num_heads,
            "Attention's q_num_heads and kv_num_heads are for 3-D inputs only",
        )
        batch, heads, length, size = q
        kv_heads, kv_length, v_size = k[1], k[2], v[3]
        _same(k[3], size, "K's head size", "Q's")
        _same(v[1], kv_heads, "V's heads", "K's")
    else:
        check(
            q_num_heads > 0 and kv_num_heads > 0,
            "3-D Attention needs q_num_heads and kv_num_heads (the heads of the hidden axis)",
        )
        batch, length, hidden = q
        kv_length = k[1]
        for name, dim, n in (("Q", hidden, q_num_heads), ("K", k[2], kv_num_heads)):
            check(isinstance(dim, int), f"Attention needs a static hidden size of {name}")
            check(dim % n == 0, f"{name}'s hidden size {dim} is not a multiple of {n} heads")
        check(isinstance(v[2], int) and v[2] % kv_num_heads == 0, f"V's hidden size {v[2]}")
        heads, kv_heads = q_num_heads, kv_num_heads
        size, v_size = hidden // heads, v[2] // kv_num_heads
        _same(k[2] // kv_num_heads, size, "K's head size", "Q's")
    _same(k[0], batch, "K's batch", "Q's")
    _same(v[0], batch, "V's batch", "Q's")
    _same(v[-2], kv_length, "V's sequence length", "K's")
    check(
        isinstance(heads, int) and isinstance(kv_heads, int) and heads % kv_heads == 0,
        f"Attention's query heads ({heads}) must be a multiple of its key/value heads ({kv_heads})",
    )
    return {
        "batch": batch,
        "heads": heads,
        "kv_heads": kv_heads,
        "length": length,
        "kv_length": kv_length,
        "size": size,
        "v_size": v_size,
        "three_d": len(q) == 3,
    }


def _same(a, b, what: str, other: str) -> None:
    unify_dims(a, b, f"Attention: {what} ({a}) must equal {other} ({b})")


@op_proto(
    "Attention",
    inputs={
        "q": FLOATS,
        "k": FLOATS,
        "v": FLOATS,
        "attn_mask": In(["bool", *FLOATS], optional=True),
        "past_key": In(FLOATS, optional=True),
        "past_value": In(FLOATS, optional=True),
        "nonpad_kv_seqlen": In(["int64"], optional=True),
    },
    outputs={"y": FLOATS, "present_key": FLOATS, "present_value": FLOATS, "qk": FLOATS},
    attrs={
        "is_causal": Attr(bool, default=False),
        "q_num_heads": Attr(int, default=0, doc="heads of 3-D Q's hidden axis"),
        "kv_num_heads": Attr(int, default=0, doc="heads of 3-D K's and V's hidden axes"),
        "scale": Attr(float, default=0.0, doc="scale of Q Kᵀ; 0: 1 / sqrt(head size)"),
        "softcap": Attr(float, default=0.0, doc="softcap * tanh(scores / softcap); 0: none"),
        "softmax_precision": Attr(DType, default=None, doc="dtype of the softmax; None: Q's"),
        "qk_matmul_output_mode": Attr(int, default=0, choices=QK_OUTPUT_MODES),
        "left_window_size": Attr(int, default=-1, doc="keys before the query; -1: all"),
        "right_window_size": Attr(int, default=-1, doc="keys after the query; -1: all"),
    },
    category="opaque",
    cost="transcendental",
)
def attention(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, **attrs):
    """softmax(Q Kᵀ * scale + bias) V (ONNX Attention; the module doc has the details).
    Returns (y, present_key, present_value, qk).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     q, k = g.input("q", (1, 2, 3, 4)), g.input("k", (1, 2, 5, 4))
    ...     y, *_ = mdsl.ops.attention(q, k, g.input("v", (1, 2, 5, 6)), is_causal=True)
    ...     g.output(y, "y")
    >>> y.shape
    (1, 2, 3, 6)
    """
    dims = attention_geometry(
        q.shape,
        k.shape,
        v.shape,
        q_num_heads=attrs["q_num_heads"],
        kv_num_heads=attrs["kv_num_heads"],
    )
    for name, t in (("K", k), ("V", v), ("past_key", past_key), ("past_value", past_value)):
        check(
            t is None or t.dtype == q.dtype,
            f"Attention's {name} must be {q.dtype}, not {t and t.dtype}",
        )
    batch, heads, kv_heads = dims["batch"], dims["heads"], dims["kv_heads"]
    total = _total_length(past_key, past_value, dims)
    key_shape = (batch, kv_heads, total, dims["size"])
    value_shape = (batch, kv_heads, total, dims["v_size"])
    scores = (batch, heads, dims["length"], total)
    if attn_mask is not None:
        _check_mask(attn_mask, q.dtype, scores)
    if nonpad_kv_seqlen is not None:
        check(past_key is None, "Attention's nonpad_kv_seqlen cannot be combined with past_key")
        check(
            nonpad_kv_seqlen.rank == 1,
            f"nonpad_kv_seqlen must be 1-D, got {nonpad_kv_seqlen.shape}",
        )
        _same(nonpad_kv_seqlen.shape[0], batch, "nonpad_kv_seqlen's length", "the batch")
    check(attrs["softcap"] >= 0, f"Attention's softcap must be >= 0, got {attrs['softcap']}")
    check(attrs["scale"] >= 0, f"Attention's scale must be >= 0, got {attrs['scale']}")
    for side in ("left_window_size", "right_window_size"):
        check(attrs[side] >= -1, f"Attention's {side} must be -1 or more, got {attrs[side]}")
    precision = attrs["softmax_precision"]
    check(
        precision is None or precision.is_float,
        f"softmax_precision must be a float dtype, got {precision}",
    )
    y_shape = (
        (batch, dims["length"], heads * dims["v_size"])
        if dims["three_d"]
        else (batch, heads, dims["length"], dims["v_size"])
    )
    return (
        TensorType(y_shape, q.dtype),
        TensorType(key_shape, q.dtype),
        TensorType(value_shape, q.dtype),
        TensorType(scores, q.dtype),
    )


def _total_length(past_key, past_value, dims):
    check(
        (past_key is None) == (past_value is None),
        "Attention takes past_key and past_value together",
    )
    if past_key is None:
        return dims["kv_length"]
    batch, kv_heads = dims["batch"], dims["kv_heads"]
    for name, t, size in (
        ("past_key", past_key, dims["size"]),
        ("past_value", past_value, dims["v_size"]),
    ):
        check(t.rank == 4, f"Attention's {name} must be 4-D, got {t.shape}")
        _same(t.shape[0], batch, f"{name}'s batch", "Q's")
        _same(t.shape[1], kv_heads, f"{name}'s heads", "K's")
        _same(t.shape[3], size, f"{name}'s head size", "the new keys'")
    _same(past_value.shape[2], past_key.shape[2], "past_value's length", "past_key's")
    return past_key.shape[2] + dims["kv_length"]


def _check_mask(mask, dtype: DType, scores: tuple) -> None:
    check(
        mask.dtype in (DType.bool_, dtype), f"attn_mask must be bool or {dtype}, not {mask.dtype}"
    )
    check(1 <= mask.rank <= 4, f"attn_mask must have rank 1 to 4, got {mask.shape}")
    last, total = mask.shape[-1], scores[-1]
    if isinstance(last, int) and isinstance(total, int):
        check(last <= total, f"attn_mask covers {last} keys, more than the {total} there are")
    check(
        not isinstance(last, Dim) or last == total,
        f"attn_mask's last dim {last} must be the number of keys {total} or a static size",
    )
    broadcast_shapes(tuple(mask.shape[:-1]), tuple(scores[:-1]))


# -- the numpy reference -------------------------------------------------------------------
def _heads(x: np.ndarray, n: int) -> np.ndarray:
    """(batch, seq, n * size) -> (batch, n, seq, size)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, n, hidden // n).transpose(0, 2, 1, 3)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b accumulated in float32 at least, rounded once to a's dtype."""
    wide = np.float64 if a.dtype == np.float64 else np.float32
    return np.matmul(a.astype(wide), b.astype(wide)).astype(a.dtype)


def attention_bias(
    dtype, length: int, total: int, *, mask, is_causal, offset, left, right, nonpad
) -> np.ndarray:
    """The additive bias of the scores (0 where a key is attended, -inf where blocked,
    the float mask's values): broadcastable to (batch, heads, length, total). `offset`:
    the keys before the first query (the past's length; with `nonpad`, per batch)."""
    neg = dtype.type(-np.inf)
    bias = np.zeros((length, total), dtype)
    if mask is not None:
        pad = total - mask.shape[-1]
        if pad > 0:
            fill = False if mask.dtype == np.bool_ else -np.inf
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=fill)
        if mask.dtype == np.bool_:
            mask = np.where(mask, dtype.type(0), neg)
        bias = bias + mask.astype(dtype)
    if nonpad is not None:
        offset = (nonpad.reshape(-1) - length).reshape(-1, 1, 1, 1)
    # query i (at position offset + i) against key j
    ahead = np.arange(total).reshape(1, total) - np.arange(length).reshape(length, 1) - offset
    allowed = np.ones(ahead.shape, bool)
    if is_causal:
        allowed &= ahead <= 0
    if left >= 0:
        allowed &= -ahead <= left
    if right >= 0:
        allowed &= ahead <= right
    bias = bias + np.where(allowed, dtype.type(0), neg)
    if nonpad is not None:
        keys = np.arange(total).reshape(1, total) < nonpad.reshape(-1, 1)
        bias = bias + np.where(keys, dtype.type(0), neg).reshape(-1, 1, 1, total)
    return bias


def _softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in x's dtype (each step rounds to it); a row of -inf
    is all zero."""
    top = np.max(x, axis=-1, keepdims=True)
    zero, one = x.dtype.type(0), x.dtype.type(1)
    e = np.exp(x - np.where(np.isneginf(top), zero, top))
    total = np.sum(e, axis=-1, keepdims=True)
    return e / np.where(total == zero, one, total)


def _attention_ref(
    q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, **attrs
):
    dtype = q.dtype
    three_d = q.ndim == 3
    if three_d:
        q = _heads(q, attrs["q_num_heads"])
        k, v = _heads(k, attrs["kv_num_heads"]), _heads(v, attrs["kv_num_heads"])
    scale = attrs["scale"] or 1.0 / np.sqrt(q.shape[3])
    root = dtype.type(np.sqrt(scale))
    present_key = k if past_key is None else np.concatenate([past_key, k], axis=2)
    present_value = v if past_value is None else np.concatenate([past_value, v], axis=2)
    length, total = q.shape[2], present_key.shape[2]
    bias = attention_bias(
        dtype,
        length,
        total,
        mask=attn_mask,
        is_causal=attrs["is_causal"],
        offset=0 if past_key is None else past_key.shape[2],
        left=attrs["left_window_size"],
        right=attrs["right_window_size"],
        nonpad=nonpad_kv_seqlen,
    )
    group = q.shape[1] // present_key.shape[1]
    keys = np.repeat(present_key, group, axis=1)
    values = np.repeat(present_value, group, axis=1)
    scores = _matmul(q * root, np.swapaxes(keys, 2, 3) * root)
    softcap = dtype.type(attrs["softcap"])
    if softcap > 0:
        scores = np.tanh(scores / softcap) * softcap
    biased = scores + bias
    precision = attrs["softmax_precision"]
    probs = _softmax(biased if precision is None else biased.astype(precision.np))
    blocked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    probs = np.where(blocked, probs.dtype.type(0), probs).astype(dtype)
    qk = {0: scores, 1: scores, 2: biased, 3: probs}[attrs["qk_matmul_output_mode"]]
    y = _matmul(probs, values)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], length, -1)
    return y, present_key, present_value, np.broadcast_to(qk, probs.shape).astype(dtype)


register_op_impl("Attention", _attention_ref)
