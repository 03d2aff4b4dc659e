"""`lower_attention`: Attention as the ops compiled targets generate code for.

Each Attention node (`mdsl.ops.attention`) becomes, step for step as its numpy reference
computes it: the heads of 3-D inputs split off (Reshape, Transpose), the cache appended
(Concat), key/value heads repeated for grouped-query attention (Unsqueeze, Expand,
Reshape), the scaled scores as one batched MatMul, the softcap (Div, Tanh, Mul), the
additive bias (Add: the mask as Where / Pad, the causal, window and padding masks as
constants or, from `nonpad_kv_seqlen`, comparisons), Softmax (in `softmax_precision`
through Casts), the rows whose every key is blocked zeroed (Where on a ReduceMax of the
bias), and the product with the values. A causal or window mask over a symbolic number
of queries or keys keeps its node (compiled targets then call the reference).

>>> import mdsl
>>> with mdsl.Graph("attend") as g:
...     q, k, v = (g.input(n, (1, 2, 4, 8)) for n in "qkv")
...     g.output(mdsl.ops.attention(q, k, v, is_causal=True)[0], "y")
>>> sorted({n.op_type for n in mdsl.passes.run(g, ["lower_attention", "dce"]).nodes})
['Add', 'Const', 'Input', 'MatMul', 'Mul', 'Output', 'Softmax', 'Transpose']
"""

from __future__ import annotations

import math

import numpy as np

from mdsl import ops
from mdsl.ir.dim import Dim
from mdsl.ir.errors import MdslError
from mdsl.ir.graph import Graph, Node, Tensor
from mdsl.ir.rewrite import all_graphs
from mdsl.ops.attention import attention_bias, attention_geometry
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Rewriter, building_at


class _Decline(Exception):
    """This Attention keeps its node (see the module doc)."""


def _heads(x: Tensor, n: int) -> Tensor:
    """(batch, seq, n * size) -> (batch, n, seq, size)."""
    split = ops.reshape(x, shape=(0, 0, n, x.shape[2] // n))
    return ops.transpose(split, perm=(0, 2, 1, 3))


def _repeated(x: Tensor, group: int) -> Tensor:
    """Each head of (batch, heads, seq, size) `group` times in a row (numpy.repeat)."""
    if group == 1:
        return x
    wide = ops.expand(ops.unsqueeze(x, axes=[2]), (1, 1, group, 1, 1))
    return ops.reshape(wide, shape=(0, x.shape[1] * group, -1, x.shape[3]))


def _scalar(value, dtype) -> np.ndarray:
    return np.full((1,), value, dtype.np)  # an array (a 0-d one would be a number)


def _bias(node: Node, q: Tensor, length, total, past) -> Tensor | np.ndarray | None:
    """The additive bias of the scores: a tensor, a constant array (the causal and
    window masks alone), or None when nothing is blocked or added."""
    attrs = node.attrs
    mask, nonpad = node.inputs[3], node.inputs[6] if len(node.inputs) > 6 else None
    windowed = (
        attrs["is_causal"] or attrs["left_window_size"] >= 0 or attrs["right_window_size"] >= 0
    )
    parts: list = []
    if mask is not None:
        parts.append(_mask_bias(mask, q, total))
    static = isinstance(length, int) and isinstance(total, int)
    if (windowed or nonpad is not None) and not static:
        raise _Decline
    if windowed and nonpad is None:
        parts.append(
            attention_bias(
                q.dtype.np,
                length,
                total,
                mask=None,
                is_causal=attrs["is_causal"],
                offset=past,
                left=attrs["left_window_size"],
                right=attrs["right_window_size"],
                nonpad=None,
            )
        )
    if nonpad is not None:
        parts.append(_padding_bias(nonpad, q, length, total, attrs, windowed))
    if not parts:
        return None
    bias = parts[0]
    for part in parts[1:]:
        bias = ops.add(bias, part) if isinstance(bias, Tensor) else ops.add(part, bias)
    return bias


def _mask_bias(mask: Tensor, q: Tensor, total) -> Tensor:
    """attn_mask as an additive bias: a bool mask's False as -inf, keys past its last
    dim blocked."""
    if mask.dtype != q.dtype:
        mask = ops.where(mask, _scalar(0, q.dtype), _scalar(-np.inf, q.dtype))
    missing = total - mask.shape[-1]
    if isinstance(missing, Dim) or missing < 0:
        raise _Decline
    if missing:
        pads = [0] * (2 * mask.ndim)
        pads[-1] = missing
        mask = ops.pad(mask, pads, constant_value=-math.inf)
    return mask


def _padding_bias(nonpad: Tensor, q: Tensor, length: int, total: int, attrs, windowed) -> Tensor:
    """The bias of an external cache: keys at or past `nonpad_kv_seqlen[b]` blocked, and
    the causal/window frontier of batch b placed at nonpad_kv_seqlen[b] - length."""
    zero, neg = _scalar(0, q.dtype), _scalar(-np.inf, q.dtype)
    lengths = ops.reshape(nonpad, shape=(-1, 1, 1, 1))
    keys = np.arange(total, dtype=np.int64).reshape(1, 1, 1, total)
    bias = ops.where(ops.less(keys, lengths), zero, neg)
    if not windowed:
        return bias
    # query i against key j: j - i - (nonpad[b] - length) keys ahead of the query
    ahead = ops.sub(keys - np.arange(length).reshape(1, 1, length, 1) + length, lengths)
    allowed = None
    conditions = []
    if attrs["is_causal"]:
        conditions.append(ops.less_equal(ahead, np.int64(0)))
    if attrs["left_window_size"] >= 0:
        conditions.append(ops.less_equal(ops.neg(ahead), np.int64(attrs["left_window_size"])))
    if attrs["right_window_size"] >= 0:
        conditions.append(ops.less_equal(ahead, np.int64(attrs["right_window_size"])))
    for condition in conditions:
        allowed = condition if allowed is None else ops.logical_and(allowed, condition)
    return ops.add(bias, ops.where(allowed, zero, neg))


def lowered(node: Node) -> list[Tensor]:
    """y, present_key, present_value and qk of `node` built from other ops."""
    attrs = node.attrs
    q, k, v, _, past_key, past_value, *_ = [*node.inputs, None, None, None, None][:7]
    dims = attention_geometry(
        q.shape,
        k.shape,
        v.shape,
        q_num_heads=attrs["q_num_heads"],
        kv_num_heads=attrs["kv_num_heads"],
    )
    if dims["three_d"]:
        q, k, v = _heads(q, dims["heads"]), _heads(k, dims["kv_heads"]), _heads(v, dims["kv_heads"])
    past = 0
    if past_key is not None:
        past = past_key.shape[2]
        k, v = ops.concat([past_key, k], axis=2), ops.concat([past_value, v], axis=2)
    length, total = dims["length"], k.shape[2]
    scale = attrs["scale"] or 1.0 / math.sqrt(dims["size"])
    root = _scalar(math.sqrt(scale), q.dtype)
    group = dims["heads"] // dims["kv_heads"]
    keys, values = _repeated(k, group), _repeated(v, group)
    scores = ops.matmul(ops.mul(q, root), ops.transpose(ops.mul(keys, root), perm=(0, 1, 3, 2)))
    if attrs["softcap"] > 0:
        cap = _scalar(attrs["softcap"], q.dtype)
        scores = ops.mul(ops.tanh(ops.div(scores, cap)), cap)
    bias = _bias(node, q, length, total, past)
    biased = scores if bias is None else ops.add(scores, bias)
    precision = attrs["softmax_precision"]
    wide = biased if precision is None or precision == q.dtype else ops.cast(biased, to=precision)
    probs = ops.softmax(wide, axis=-1)
    if bias is not None:
        probs = _zero_blocked_rows(probs, bias)
    if probs.dtype != q.dtype:
        probs = ops.cast(probs, to=q.dtype)
    qk = {0: scores, 1: scores, 2: biased, 3: probs}[attrs["qk_matmul_output_mode"]]
    y = ops.matmul(probs, values)
    if dims["three_d"]:
        y = ops.reshape(ops.transpose(y, perm=(0, 2, 1, 3)), shape=(0, 0, -1))
    return [y, k, v, qk]


def _zero_blocked_rows(probs: Tensor, bias) -> Tensor:
    """0 in the rows where the bias blocks every key (their softmax is 0 / 0)."""
    zero = _scalar(0, probs.dtype)
    if isinstance(bias, np.ndarray):
        blocked = np.isneginf(bias.max(axis=-1, keepdims=True))
        return ops.where(blocked, zero, probs) if blocked.any() else probs
    top = ops.reduce_max(bias, axes=[-1], keepdims=True)
    return ops.where(ops.equal(top, _scalar(-np.inf, bias.dtype)), zero, probs)


def _replace_all(rw: Rewriter, node: Node) -> bool:
    try:
        with building_at(rw.g, node):
            new = lowered(node)
    except (_Decline, MdslError):
        return False
    pairs = list(zip(node.outputs, new))
    if any(old.shape != t.shape or old.dtype != t.dtype for old, t in pairs if rw.n_uses(old)):
        return False
    for old, t in pairs:
        if rw.n_uses(old):
            rw.replace(old, t)
    rw.count += 1
    return True


@register("lower_attention", levels=(2, 3), phase="rewrite")
def lower_attention(g: Graph) -> PassResult:
    """Rewrite Attention nodes as MatMul, Softmax and pointwise ops, which compile to
    generated code (the module doc says how, and which keep their node)."""
    count = 0
    for sub in list(all_graphs(g)):
        rewriter = Rewriter(sub)

        def visit(node: Node, rw: Rewriter) -> None:
            if node.op_type == "Attention":
                _replace_all(rw, node)

        count += rewriter.sweep(visit)
    return PassResult(g, count > 0, f"lowered {count} Attention(s)")
