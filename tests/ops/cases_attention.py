"""Cases for Attention against torch's scaled_dot_product_attention (4-D, masks, scale,
grouped-query heads, causal with as many queries as keys: torch aligns the causal mask
top-left, ONNX bottom-right) and against ONNX's reference implementation (3-D inputs,
caches, softcap, windows, external-cache padding, the qk outputs)."""

from __future__ import annotations

import numpy as np
import torch.nn.functional as F

from mdsl import MdslError, ops
from tests.ops.op_table import OpCase, rand

B, H, L, S, D = 2, 4, 3, 5, 8


def _sdpa(**kw):
    def ref(q, k, v, *mask):
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[0] if mask else None, enable_gqa=q.shape[1] != k.shape[1], **kw
        )
        return y

    return ref


def _torch_case(case_id, *, kv_heads=H, length=L, mask=None, **attrs):
    inputs = {
        "q": rand(B, H, length, D, seed=1),
        "k": rand(B, kv_heads, S, D, seed=2),
        "v": rand(B, kv_heads, S, D + 2, seed=3),
    }
    if mask is not None:
        inputs["mask"] = mask

    def build(q, k, v, *m):
        return ops.attention(q, k, v, m[0] if m else None, **attrs)[0]

    torch_kw = {"is_causal": attrs.get("is_causal", False)}
    if "scale" in attrs:
        torch_kw["scale"] = attrs["scale"]
    return OpCase("Attention", build, inputs, _sdpa(**torch_kw), id=case_id, rtol=1e-5, atol=1e-5)


def _onnx_ref(n_outputs: int, **attrs):
    from onnx.reference.ops.op_attention import _compute_attention

    names = ("attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")

    def ref(q, k, v, *optional):
        extra = dict(zip(attrs.pop("_inputs", names), optional))
        out = _compute_attention(
            q, k, v, **extra, **{n: a for n, a in attrs.items() if a is not None}
        )
        return out[:n_outputs]

    return ref


def _onnx_case(case_id, inputs: dict, n_outputs=1, order=None, **attrs):
    """A case against ONNX's reference; `inputs` beyond q, k, v name optional inputs."""
    slots = ["attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
    given = [n for n in inputs if n not in ("q", "k", "v")]

    def build(q, k, v, *rest):
        optional = dict(zip(given, rest))
        outs = ops.attention(q, k, v, *[optional.get(s) for s in slots], **attrs)
        return outs[:n_outputs] if n_outputs > 1 else outs[0]

    ref_attrs = {
        "scale": attrs.get("scale"),
        "is_causal": attrs.get("is_causal", False),
        "q_num_heads": attrs.get("q_num_heads"),
        "kv_num_heads": attrs.get("kv_num_heads"),
        "softcap": attrs.get("softcap"),
        "qk_matmul_output_mode": attrs.get("qk_matmul_output_mode"),
        "left_window_size": attrs.get("left_window_size"),
        "right_window_size": attrs.get("right_window_size"),
        "_inputs": given,
    }
    return OpCase(
        "Attention", build, inputs, numpy_ref=_onnx_ref(n_outputs, **ref_attrs), id=case_id
    )


_BOOL_MASK = rand(L, S, dtype="bool", seed=4)
_BOOL_MASK[:, 0] = True  # no row blocked entirely (torch gives NaN there)

CASES = [
    _torch_case("4d"),
    _torch_case("causal", length=S, is_causal=True),
    _torch_case("gqa-causal", kv_heads=2, length=S, is_causal=True),
    _torch_case("bool-mask", mask=_BOOL_MASK),
    _torch_case("float-mask-scale", mask=rand(B, 1, L, S, seed=5), scale=0.3),
    _onnx_case(
        "3d-gqa",
        {
            "q": rand(B, L, 4 * D, seed=1),
            "k": rand(B, S, 2 * D, seed=2),
            "v": rand(B, S, 2 * 6, seed=3),
        },
        q_num_heads=4,
        kv_num_heads=2,
    ),
    _onnx_case(
        "past-causal-present",
        {
            "q": rand(B, H, L, D, seed=1),
            "k": rand(B, H, L, D, seed=2),
            "v": rand(B, H, L, D, seed=3),
            "past_key": rand(B, H, 2, D, seed=4),
            "past_value": rand(B, H, 2, D, seed=5),
        },
        n_outputs=4,
        is_causal=True,
        qk_matmul_output_mode=2,
    ),
    _onnx_case(
        "softcap-short-mask-softmax-output",
        {
            "q": rand(B, H, L, D, seed=1),
            "k": rand(B, H, S, D, seed=2),
            "v": rand(B, H, S, D, seed=3),
            "attn_mask": rand(L, S - 2, seed=6),
        },
        n_outputs=4,
        softcap=2.0,
        qk_matmul_output_mode=3,
    ),
    _onnx_case(
        "window-external-cache",
        {
            "q": rand(B, H, L, D, seed=1),
            "k": rand(B, H, S, D, seed=2),
            "v": rand(B, H, S, D, seed=3),
            "nonpad_kv_seqlen": np.array([4, 5], np.int64),
        },
        is_causal=True,
        left_window_size=1,
    ),
    OpCase(
        "Attention",
        lambda q, k, v: ops.attention(q, k, v),
        {"q": rand(B, L, 8), "k": rand(B, S, 8), "v": rand(B, S, 8)},
        raises=MdslError,
        id="3d-without-heads",
    ),
    OpCase(
        "Attention",
        lambda q, k, v: ops.attention(q, k, v),
        {"q": rand(B, 3, L, D), "k": rand(B, 2, S, D), "v": rand(B, 2, S, D)},
        raises=MdslError,
        id="heads-not-a-multiple",
    ),
]
