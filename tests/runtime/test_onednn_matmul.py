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
    ((128, 768), 768, 3072, True, "gelu", False, False),  # the MLP's first layer
    ((131, 300), 300, 259, False, None, False, False),  # no block size divides M, K, N
    ((133, 257), 257, 301, True, "relu", True, False),
    ((2, 70, 256), 256, 320, True, None, False, False),  # batch dims folded into 140 rows
    ((160, 384), 384, 288, True, "relu", False, True),  # Gemm, transB
]


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
    w, b = _rand(256, 512, scale=1 / 16), _rand(512)
    small = _graph((17, 256), w, b, "relu", False, False)
    exe = mdsl.compile(small, "c", threads=1)
    assert ONEDNN_CALL not in _source(exe) and "mdsl_sgemm_packed(" in _source(exe)
    big = _graph((128, 256), w, b, "relu", False, False)
    feeds = {"x": _rand(128, 256)}
    with onednn.disabled():
        hand = mdsl.compile(big, "c", threads=1)
        got = _first(hand(**feeds))
    assert ONEDNN_CALL not in _source(hand) and "mdsl_sgemm_packed(" in _source(hand)
    np.testing.assert_allclose(got, _first(mdsl.compile(big, "python")(**feeds)), atol=1e-4)


@needs_onednn
def test_a_primitive_of_another_weights_layout_is_refused_not_fed_wrong_data(monkeypatch):
    """Weights reordered at plan time into a layout of the same size as the primitive's
    but another blocking (another machine's oneDNN may choose so) fail the call with an
    error; the byte size alone would have let them through."""
    from mdsl.codegen import onednn_matmul

    real = onednn_matmul._MatMul.layout_words
    swapped = lambda self, what: tuple(reversed(real(self, what)))  # noqa: E731
    monkeypatch.setattr(onednn_matmul._MatMul, "layout_words", swapped)
    g = _graph((128, 256), _rand(256, 320, scale=1 / 16), None, None, False, False)
    exe = mdsl.compile(g, "c", threads=1)
    with pytest.raises(mdsl.MdslError):
        exe(x=_rand(128, 256))


@needs_onednn
def test_calls_on_one_thread_and_on_the_team_each_have_their_primitive():
    """A oneDNN primitive runs on the team size it was made at: the first call (a
    one-thread probe) would otherwise pin every later whole-team call to one thread. The
    team probe alternates the first calls between one thread and the team, so both
    primitives are made and used here, each equal to the interpreter."""
    g = _graph((128, 256), _rand(256, 320, scale=1 / 16), _rand(320), "relu", False, False)
    exe = mdsl.compile(g, "c", threads=2)
    assert "MDSL_DNNL_TEAM_STATE(" in _source(exe)
    for _ in range(6):
        x = _rand(128, 256)
        want = _first(mdsl.interpret(g, {"x": x}))
        np.testing.assert_allclose(_first(exe(x=x)), want, rtol=1e-4, atol=1e-4)
