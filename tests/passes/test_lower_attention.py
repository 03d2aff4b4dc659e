"""lower_attention: Attention nodes become MatMul/Softmax/pointwise ops that match the
op's reference on the interpreter and compile to C with no Python callback, for every
feature (3-D and 4-D, grouped-query heads, caches, masks, softcap, windows, external
caches, every qk output); half-float MatMuls run on C as float32 GEMMs."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops

B, H, L, S, D = 2, 4, 3, 5, 8
RNG = np.random.default_rng(0)


def _inputs(three_d=False, kv_heads=H, dtype=np.float32):
    if three_d:
        shapes = {"q": (B, L, H * D), "k": (B, S, kv_heads * D), "v": (B, S, kv_heads * 6)}
    else:
        shapes = {"q": (B, H, L, D), "k": (B, kv_heads, S, D), "v": (B, kv_heads, S, 6)}
    return {n: RNG.standard_normal(s).astype(dtype) for n, s in shapes.items()}


VARIANTS = {
    "3d-gqa-causal": (
        dict(three_d=True, kv_heads=2),
        {},
        dict(q_num_heads=H, kv_num_heads=2, is_causal=True),
    ),
    "bool-mask-all-blocked-row": (
        dict(),
        {"attn_mask": np.array([[True] * S, [False] * S, [True, False] * 2 + [True]])},
        {},
    ),
    "short-float-mask-softcap-mode3": (
        dict(),
        {"attn_mask": RNG.standard_normal((B, 1, L, S - 2)).astype(np.float32)},
        dict(softcap=3.0, qk_matmul_output_mode=3),
    ),
    "past-causal-window-mode2": (
        dict(),
        {
            "past_key": RNG.standard_normal((B, H, 2, D)).astype(np.float32),
            "past_value": RNG.standard_normal((B, H, 2, 6)).astype(np.float32),
        },
        dict(is_causal=True, left_window_size=2, qk_matmul_output_mode=2),
    ),
    "external-cache-causal": (
        dict(),
        {"nonpad_kv_seqlen": np.array([2, 5], np.int64)},
        dict(is_causal=True, scale=0.5),
    ),
    "softmax-in-float64": (dict(), {}, dict(softmax_precision="float64", qk_matmul_output_mode=1)),
}
SLOTS = ("attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")


def _graph(feeds: dict, attrs: dict) -> mdsl.Graph:
    with mdsl.Graph("attention") as g:
        t = {n: g.input(n, a.shape, mdsl.DType.of(a.dtype)) for n, a in feeds.items()}
        outs = ops.attention(t["q"], t["k"], t["v"], *[t.get(s) for s in SLOTS], **attrs)
        for name, out in zip(("y", "present_key", "present_value", "qk"), outs):
            g.output(out, name)
    return g


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_lowered_attention_matches_the_reference_and_compiles_without_callbacks(variant):
    shape_kw, optional, attrs = VARIANTS[variant]
    feeds = {**_inputs(**shape_kw), **optional}
    g = _graph(feeds, attrs)
    want = mdsl.interpret(g, feeds)
    lowered = mdsl.passes.run(g, ["lower_attention", "dce"])
    assert "Attention" not in {n.op_type for n in lowered.nodes}
    got = mdsl.interpret(lowered, feeds)
    exe = mdsl.compile(g, backend="c")
    compiled = exe(**feeds)
    assert not [f for f in exe.plan.fallbacks if "runs in Python" in f]
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(compiled[name], w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_causal_mask_over_symbolic_lengths_keeps_its_node_and_still_runs():
    with mdsl.Graph("symbolic") as g:
        q, k, v = (g.input(n, (1, 2, "T", 4)) for n in "qkv")
        g.output(ops.attention(q, k, v, is_causal=True)[0], "y")
    lowered = mdsl.passes.run(g, ["lower_attention"])
    assert "Attention" in {n.op_type for n in lowered.nodes}
    feeds = {n: RNG.standard_normal((1, 2, 5, 4)).astype(np.float32) for n in "qkv"}
    np.testing.assert_allclose(
        mdsl.compile(g, backend="c")(**feeds)["y"],
        mdsl.interpret(g, feeds)["y"],
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_float_matmuls_run_on_c_as_float32_gemms(dtype):
    with mdsl.Graph("half") as g:
        a, b = g.input("a", (2, 3, 40), dtype), g.input("b", (2, 40, 5), dtype)
        g.output(ops.matmul(a, b) * 2.0, "y")
    np_dtype = mdsl.DType.of(dtype).np
    feeds = {
        "a": RNG.standard_normal((2, 3, 40)).astype(np_dtype),
        "b": RNG.standard_normal((2, 40, 5)).astype(np_dtype),
    }
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == []
    want = (
        (feeds["a"].astype(np.float32) @ feeds["b"].astype(np.float32)).astype(np_dtype)
        * np_dtype.type(2)
    ).astype(np_dtype)
    np.testing.assert_array_equal(exe(**feeds)["y"].astype(np.float32), want.astype(np.float32))
