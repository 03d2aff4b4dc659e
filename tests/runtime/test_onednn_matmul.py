"""GEMMs computed by oneDNN's matmul in the C target (`mdsl.codegen.onednn_matmul`)
against the interpreter: float32 MatMul / Gemm of constant weights, with and without bias,
activation and residual, sizes off every block, batch dims folded into rows; the routed
class only (smaller M keeps the packed kernel, and so does `onednn.disabled()`)."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import onednn
from tests.runtime.machine import needs_avx512

RNG = np.random.default_rng(1602)
needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)
ONEDNN_CALL = "mdsl_dnnl_matmul_run("


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _source(exe) -> str:
    return "\n".join(exe.sources.values())


def _first(out):
    return out if isinstance(out, np.ndarray) else next(iter(out.values()))


def _graph(x_shape, w, bias, act, residual, trans_b):
    with mdsl.Graph("mm") as g:
        x = g.input("x", x_shape)
        if trans_b:  # ONNX Gemm with transB = 1: w is [N, K]
            c = g.const("b", bias) if bias is not None else g.const("b", np.zeros(1, np.float32))
            y = ops.gemm(x, g.const("w", w), c, alpha=1.0, beta=1.0, transA=False, transB=True)
        else:
            y = ops.matmul(x, g.const("w", w))
            y = y + g.const("b", bias) if bias is not None else y
        if act == "relu":
            y = ops.relu(y)
        elif act == "gelu":
            y = ops.gelu(y, approximate="none")
        if residual:
            y = y + g.input("r", (*x_shape[:-1], w.shape[0] if trans_b else w.shape[1]))
        g.output(y, "y")
    return g


CASES = [
    # (x shape, K, N, bias, activation, residual, transB)
    ((512, 768), 768, 3072, True, "gelu", False, False),  # the MLP's first layer
    ((517, 300), 300, 259, False, None, False, False),  # no block size divides M, K, N
    ((133, 2053), 2053, 301, True, "relu", True, False),  # few rows, a long K
    ((2, 260, 256), 256, 320, True, None, False, False),  # batch dims folded into 520 rows
    ((160, 2048), 2048, 288, True, "relu", False, True),  # Gemm, transB
]


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x{}-k{}-n{}-b{}-{}-r{}-t{}".format(*c))
def test_gemm_by_onednn_equals_interpreter(case, threads):
    x_shape, k, n, bias, act, residual, trans_b = case
    w = _rand(n, k, scale=k**-0.5) if trans_b else _rand(k, n, scale=k**-0.5)
    g = _graph(x_shape, w, _rand(n) if bias else None, act, residual, trans_b)
    feeds = {"x": _rand(*x_shape)}
    if residual:
        feeds["r"] = _rand(*x_shape[:-1], n)
    exe = mdsl.compile(g, "c", threads=threads)
    assert ONEDNN_CALL in _source(exe)
    got, expect = _first(exe(**feeds)), _first(mdsl.compile(g, "python")(**feeds))
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
    assert not np.array_equal(got, np.zeros_like(got))


@needs_onednn
def test_small_rows_and_disabled_keep_the_packed_kernel():
    """Below 512 rows with a K under 2048 (ViT's 197 x 768 by 768 x 2304) the packed
    kernel was 2-5% faster than oneDNN's matmul on an AVX-512 Xeon, and stays."""
    w, b = _rand(256, 512, scale=1 / 16), _rand(512)
    for rows in (17, 197):
        exe = mdsl.compile(_graph((rows, 256), w, b, "relu", False, False), "c", threads=1)
        assert ONEDNN_CALL not in _source(exe) and "mdsl_sgemm_packed(" in _source(exe)
    big = _graph((512, 256), w, b, "relu", False, False)
    feeds = {"x": _rand(512, 256)}
    with onednn.disabled():
        hand = mdsl.compile(big, "c", threads=1)
        got = _first(hand(**feeds))
    assert ONEDNN_CALL not in _source(hand) and "mdsl_sgemm_packed(" in _source(hand)
    np.testing.assert_allclose(got, _first(mdsl.compile(big, "python")(**feeds)), atol=1e-4)


@needs_avx512
@needs_onednn
def test_a_primitive_of_another_weights_layout_is_refused_not_fed_wrong_data(monkeypatch):
    """Weights reordered at plan time into a layout of the same size as the primitive's
    but another blocking (another machine's oneDNN may choose so) fail the call with an
    error; the byte size alone would have let them through."""
    from mdsl.codegen import onednn_matmul

    real = onednn_matmul._MatMul.layout_words
    swapped = lambda self, what: tuple(reversed(real(self, what)))  # noqa: E731
    monkeypatch.setattr(onednn_matmul._MatMul, "layout_words", swapped)
    g = _graph((512, 256), _rand(256, 320, scale=1 / 16), None, None, False, False)
    exe = mdsl.compile(g, "c", threads=1)
    with pytest.raises(mdsl.MdslError):
        exe(x=_rand(512, 256))


@needs_avx512
@needs_onednn
def test_calls_on_one_thread_and_on_the_team_each_have_their_primitive():
    """A oneDNN primitive runs on the team size it was made at: the first call (a
    one-thread probe) would otherwise pin every later whole-team call to one thread. The
    team probe alternates the first calls between one thread and the team, so both
    primitives are made and used here, each equal to the interpreter."""
    g = _graph((512, 256), _rand(256, 320, scale=1 / 16), _rand(320), "relu", False, False)
    exe = mdsl.compile(g, "c", threads=2)
    assert "MDSL_DNNL_TEAM_STATE(" in _source(exe)
    for _ in range(6):
        x = _rand(512, 256)
        want = _first(mdsl.interpret(g, {"x": x}))
        np.testing.assert_allclose(_first(exe(x=x)), want, rtol=1e-4, atol=1e-4)


# -- batched products of run-time operands (attention) -----------------------------------------
STRIDED = "operands read in place by strides"


def _attention(shape, scale_op, head_split=False):
    """softmax(Q Kᵀ ∘ scale) V over [B, H, S, D]; with `head_split` Q, K and V are
    [B, S, H*D] inputs split into heads by Reshape + Transpose (BERT's layout, read in
    place with a row stride of H*D)."""
    b, h, s, d = shape
    with mdsl.Graph("attn") as g:
        if head_split:
            q, k, v = (
                ops.transpose(
                    ops.reshape(g.input(n, (b, s, h * d)), shape=(b, s, h, d)), perm=(0, 2, 1, 3)
                )
                for n in "qkv"
            )
        else:
            q, k, v = (g.input(n, shape) for n in "qkv")
        scores = ops.matmul(q, ops.transpose(k, perm=(0, 1, 3, 2)))
        scores = scores * 0.125 if scale_op == "mul" else ops.div(scores, np.float32(scale_op))
        g.output(ops.matmul(ops.softmax(scores, axis=-1), v), "y")
    return g


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "shape, scale_op, head_split",
    [
        ((1, 3, 128, 64), "mul", False),  # the benchmark's shape, smaller batch
        ((2, 2, 67, 65), 8.0, False),  # no block size divides S or D; / 8 is alpha 0.125
        ((2, 3, 70, 64), "mul", True),  # BERT's head split: strided rows and batch
    ],
)
def test_batched_attention_products_by_onednn_equal_the_interpreter(
    shape, scale_op, head_split, threads
):
    g = _attention(shape, scale_op, head_split)
    b, h, s, d = shape
    feed_shape = (b, s, h * d) if head_split else shape
    feeds = {n: _rand(*feed_shape) for n in "qkv"}
    exe = mdsl.compile(g, "c", threads=threads)
    source = _source(exe)
    assert source.count(STRIDED) == 2, source  # Q·Kᵀ and P·V
    assert "alpha 0.125" in source
    for _ in range(3):  # the team probe: one-thread and whole-team primitives
        got, want = _first(exe(**feeds)), _first(mdsl.interpret(g, feeds))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_avx512
@needs_onednn
def test_broadcast_batch_dims_are_size_one_for_onednn():
    """[2, 3, M, K] @ [3, K, N] and [2, 1, M, K] @ [2, 3, K, N]: the operand that
    broadcasts a batch dim reads it with size 1."""
    with mdsl.Graph("bcast") as g:
        g.output(ops.matmul(g.input("a", (2, 3, 72, 64)), g.input("b", (3, 64, 66))), "y")
        g.output(ops.matmul(g.input("c", (2, 1, 72, 64)), g.input("d", (2, 3, 64, 66))), "z")
    feeds = {"a": _rand(2, 3, 72, 64), "b": _rand(3, 64, 66)}
    feeds |= {"c": _rand(2, 1, 72, 64), "d": _rand(2, 3, 64, 66)}
    exe = mdsl.compile(g, "c", threads=1)
    assert _source(exe).count(STRIDED) == 2
    got, want = exe(**feeds), mdsl.interpret(g, feeds)
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@needs_onednn
def test_small_products_keep_blas():
    """Products with a side below 64 stay on OpenBLAS per batch entry (not faster on
    oneDNN), and equal the interpreter."""
    shape = (1, 2, 40, 64)
    g = _attention(shape, "mul")
    feeds = {n: _rand(*shape) for n in "qkv"}
    exe = mdsl.compile(g, "c", threads=1)
    assert STRIDED not in _source(exe)
    np.testing.assert_allclose(
        _first(exe(**feeds)), _first(mdsl.interpret(g, feeds)), rtol=1e-5, atol=1e-6
    )


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_a_batched_product_with_an_epilogue_runs_it_after_the_product(threads):
    """A scale that is not a power of two and a causal mask (GPT-2's `where(mask, -inf,
    scores / 3)`) stay an epilogue, run over every batch entry's rows after oneDNN's
    product: equal to the interpreter, with a mask broadcast over the batch dims."""
    b, h, s, d = 2, 3, 66, 64
    causal = np.triu(np.ones((s, s), bool), k=1)
    with mdsl.Graph("masked") as g:
        q, k, v = (g.input(n, (b, h, s, d)) for n in "qkv")
        scores = ops.div(ops.matmul(q, ops.transpose(k, perm=(0, 1, 3, 2))), np.float32(3.0))
        masked = ops.where(g.const("causal", causal), np.float32(-1e9), scores)
        g.output(ops.matmul(ops.softmax(masked, axis=-1), v), "y")
    feeds = {n: _rand(b, h, s, d) for n in "qkv"}
    exe = mdsl.compile(g, "c", threads=threads)
    source = _source(exe)
    assert source.count(STRIDED) == 2 and "for (int64_t r = 0; r < 396; r++)" in source
    for _ in range(3):
        np.testing.assert_allclose(
            _first(exe(**feeds)), _first(mdsl.interpret(g, feeds)), rtol=1e-5, atol=1e-6
        )


def test_a_constant_scale_is_blas_alpha_without_onednn():
    """Without oneDNN the scale still becomes the BLAS call's alpha: no epilogue pass."""
    g = _attention((1, 2, 16, 8), "mul")
    feeds = {n: _rand(1, 2, 16, 8) for n in "qkv"}
    with onednn.disabled():
        exe = mdsl.compile(g, "c", threads=1)
        got = _first(exe(**feeds))
    source = _source(exe)
    assert "(float)0.125," in source and "acc * 0.125" not in source.replace("f)", ")")
    np.testing.assert_allclose(got, _first(mdsl.interpret(g, feeds)), rtol=1e-5, atol=1e-6)
