"""The C backend's convolution and GEMM kernels against PyTorch and the interpreter:
the direct depthwise kernel, batched GEMMs folded into one, and the per-call team size.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import onednn

RNG = np.random.default_rng(1616)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _compile(g, **kw):
    return mdsl.compile(g, "c", **kw)


def _kernel_source(exe) -> str:
    return "\n".join(exe.sources.values())


# -- depthwise convolution --------------------------------------------------------------------------
DEPTHWISE = [
    # (channels, size, kernel, stride, pad, dilation)
    (8, 9, 3, 1, 1, 1),
    (6, 10, 3, 2, 1, 1),
    (5, 11, 5, 1, 2, 1),
    (4, 12, 3, 2, 0, 1),
    (3, 13, 3, 1, 2, 2),
    (7, 7, 7, 3, 3, 1),
    (4, 14, 7, 1, 3, 1),  # ConvNeXt's 7x7 on a narrow plane: summed on the padded grid
    (3, 40, 3, 1, 1, 1),  # 40 wide: a vector loop per output row
    (5, 15, 3, 2, 2, 2),  # stride 2, dilated: every tap in the even columns
    (3, 17, 5, 2, 2, 1),  # stride 2, an odd padded width
    (2, 260, 3, 1, 1, 1),  # a plane too large for the stack: the row-buffer kernel
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "c{}-s{}-k{}-st{}-p{}-d{}".format(*c))
def test_depthwise_conv_with_bias_and_relu6_equals_torch(case):
    c, size, k, stride, pad, dil = case
    x, w, b = _rand(2, c, size, size), _rand(c, 1, k, k), _rand(c)
    with mdsl.Graph("dw") as g:
        xi = g.input("x", x.shape)
        y = ops.conv2d(
            xi,
            g.const("w", w),
            g.const("b", b),
            strides=(stride, stride),
            pads=(pad,) * 4,
            dilations=(dil, dil),
            group=c,
        )
        g.output(ops.clip(y, 0.0, 6.0), "y")
    exe = _compile(g)
    assert "Depthwise convolution, direct" not in _kernel_source(exe)  # docstring, not C
    direct = "zero-padded:" if size < 256 else "float row["
    assert direct in _kernel_source(exe)  # a direct kernel ran, not im2col
    on_grid = stride == 1 and size + 2 * pad - dil * (k - 1) < 32  # output narrower than 32
    assert ("sums[p] =" in _kernel_source(exe)) == on_grid
    assert ("phase1[" in _kernel_source(exe)) == (stride == 2 and size < 256)  # split columns
    expect = F.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, pad, dil, c
    ).clamp(0, 6)
    np.testing.assert_allclose(exe(x=x)["y"], expect.numpy(), rtol=1e-5, atol=1e-5)


def test_depthwise_conv_with_a_residual_and_a_symbolic_batch_equals_the_interpreter():
    c = 6
    w = _rand(c, 1, 3, 3)
    with mdsl.Graph("dw_residual") as g:
        xi = g.input("x", ("N", c, 8, 8))
        y = ops.conv2d(xi, g.const("w", w), pads=(1, 1, 1, 1), group=c)
        g.output(ops.relu(y + xi), "y")
    exe = _compile(g)
    for batch in (1, 3):
        x = _rand(batch, c, 8, 8)
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-5
        )


# -- batched GEMM folded into one GEMM --------------------------------------------------------------
def _matmul_graph(a_shape, b_shape, epilogue=None, name="bmm"):
    b = _rand(*b_shape)
    with mdsl.Graph(name) as g:
        a = g.input("a", a_shape)
        y = ops.matmul(a, g.const("b", b))
        if epilogue is not None:
            y = epilogue(g, y)
        g.output(y, "y")
    return g


FOLDS = {
    # id: (a shape, b shape, epilogue, folds into one GEMM)
    "m1-bias": ((17, 1, 48), (48, 40), lambda g, y: y + g.const("e", _rand(40)), True),
    "m3-2batch-dims": ((2, 3, 4, 16), (16, 24), None, True),
    "residual-per-batch": (
        (5, 2, 16),
        (16, 8),
        lambda g, y: y * g.const("e", _rand(5, 1, 8)),
        False,
    ),
    "residual-full": ((5, 2, 16), (16, 8), lambda g, y: y + g.const("e", _rand(5, 2, 8)), True),
    "batched-b": ((4, 3, 16), (4, 16, 8), None, False),
}


@pytest.mark.parametrize("key", list(FOLDS))
def test_batched_matmul_with_a_shared_weight_equals_the_interpreter(key):
    a_shape, b_shape, epilogue, folds = FOLDS[key]
    g = _matmul_graph(a_shape, b_shape, epilogue, name=f"bmm_{key.replace('-', '_')}")
    exe = _compile(g)
    a = _rand(*a_shape)
    np.testing.assert_allclose(
        exe(a=a)["y"], mdsl.interpret(g, {"a": a})["y"], rtol=1e-5, atol=1e-5
    )
    m = int(np.prod(a_shape[:-1]))
    one_gemm = "MDSL_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, mlen, nlen" in (
        _kernel_source(exe)
    ) and f"mt * {m}" in _kernel_source(exe)
    assert one_gemm == folds


def test_a_symbolic_batch_of_rows_folds_and_runs_at_two_sizes():
    g = _matmul_graph(("N", 1, 32), (32, 24), lambda g, y: y + g.const("e", _rand(24)), "bmm_sym")
    exe = _compile(g)
    for n in (1, 7):
        a = _rand(n, 1, 32)
        np.testing.assert_allclose(
            exe(a=a)["y"], mdsl.interpret(g, {"a": a})["y"], rtol=1e-5, atol=1e-5
        )
    assert "bi0" not in _kernel_source(exe)  # no batch loop left


def test_one_row_per_batch_read_through_a_transpose_folds_into_one_gemm():
    # nn.MultiheadAttention's export: [1, S, K] transposed to [S, 1, K] @ W; the transpose is
    # read in place, so A's row stride is S*K while its batch stride is K
    w, bias = _rand(48, 40), _rand(40)
    with mdsl.Graph("bmm_one_row_transposed") as g:
        x = g.input("x", (1, 17, 48))
        y = ops.matmul(ops.transpose(x, perm=(1, 0, 2)), g.const("w", w)) + g.const("e", bias)
        g.output(y, "y")
    exe = _compile(g)
    x = _rand(1, 17, 48)
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-5
    )
    assert "bi0" not in _kernel_source(exe)  # one GEMM of 17 rows, no loop of 17 products


# -- team size per call -----------------------------------------------------------------------------
def test_calls_on_two_threads_choose_a_team_and_stay_exact():
    """Whatever team each call picks (its first calls try both), results are the same."""
    g = _matmul_graph((64, 128), (128, 256), lambda g, y: ops.relu(y), "team_exact")
    a = _rand(64, 128)
    expect = mdsl.interpret(g, {"a": a})["y"]
    exe = _compile(g, threads=2)
    for _ in range(40):
        np.testing.assert_allclose(exe(a=a)["y"], expect, rtol=1e-5, atol=1e-5)
    assert "mdsl_team_begin" in _kernel_source(exe)


# -- GEMM with its constant weight packed at plan time ----------------------------------------------
PACKED = {
    # id: (a shape, b shape)
    "m1-n-tail": ((1, 96), (96, 40)),
    "m13-narrow": ((13, 64), (64, 7)),
    "m25-two-panels": ((25, 128), (128, 64)),
    "m40-wide": ((40, 80), (80, 300)),
    "batch-of-rows": ((3, 5, 96), (96, 33)),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("key", list(PACKED))
def test_matmul_with_a_packed_constant_weight_equals_the_interpreter(key, threads):
    a_shape, b_shape = PACKED[key]
    g = _matmul_graph(a_shape, b_shape, lambda g, y: ops.relu(y), f"packed_{key.replace('-', '_')}")
    exe = _compile(g, threads=threads)
    assert "mdsl_sgemm_packed(mlen" in _kernel_source(exe)
    a = _rand(*a_shape)
    for _ in range(6):  # both team sizes run
        np.testing.assert_allclose(
            exe(a=a)["y"], mdsl.interpret(g, {"a": a})["y"], rtol=1e-5, atol=1e-5
        )


# GEMMs too narrow for four tiles a core, still split over the team (a [64, 1024] x
# [1024, 256] FFN had run on one thread at any team size)
SPLIT = {
    # id: (a shape, b shape, tiles)
    "ffn-four-column-tiles": ((64, 1024), (1024, 256), 4),
    "column-tiles-with-a-tail": ((40, 300), (300, 200), 3),  # 96 + 96 + 8 columns
    "row-tiles": ((48, 700), (700, 100), 3),  # 16 rows each
}


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic-m"])
@pytest.mark.parametrize("key", list(SPLIT))
def test_a_narrow_gemm_is_split_into_tiles_and_equals_the_interpreter(key, symbolic):
    a_shape, b_shape, tiles = SPLIT[key]
    name = f"split_{key.replace('-', '_')}"
    g = _matmul_graph((("M",) if symbolic else a_shape[:1]) + a_shape[1:], b_shape, name=name)
    exe = _compile(g, threads=2)
    a = _rand(*a_shape)
    for _ in range(6):  # both team sizes run
        np.testing.assert_allclose(
            exe(a=a)["y"], mdsl.interpret(g, {"a": a})["y"], rtol=1e-5, atol=1e-4
        )
    source = _kernel_source(exe)
    if not symbolic:
        assert f"tile < {tiles}; tile++" in source
    else:  # tiled at run time
        assert "by_cols >= by_rows" in source


def test_gemm_with_a_transposed_constant_weight_and_a_symbolic_m_is_packed():
    w, bias = _rand(48, 72), _rand(48)
    with mdsl.Graph("packed_gemm_trans") as g:
        a = g.input("a", ("M", 72))
        g.output(ops.gemm(a, g.const("w", w), g.const("bias", bias), transB=True), "y")
    exe = _compile(g)
    for m in (1, 30):
        x = _rand(m, 72)
        np.testing.assert_allclose(exe(a=x)["y"], x @ w.T + bias, rtol=1e-5, atol=1e-4)
    assert "mdsl_sgemm_packed(mlen" in _kernel_source(exe)


def test_a_weight_that_is_not_a_constant_goes_to_blas():
    with mdsl.Graph("unpacked") as g:
        a, b = g.input("a", (8, 96)), g.input("b", (96, 16))
        g.output(ops.matmul(a, b), "y")
    exe = _compile(g)
    assert "mdsl_sgemm_packed" not in _kernel_source(exe)
    x, y = _rand(8, 96), _rand(96, 16)
    np.testing.assert_allclose(exe(a=x, b=y)["y"], x @ y, rtol=1e-5, atol=1e-4)


# -- dense convolution on packed weights ------------------------------------------------------------
DENSE = [
    # (cin, cout, size, kernel, stride, pad, dilation)
    (3, 5, 9, 3, 1, 1, 1),
    (8, 16, 10, 3, 2, 1, 1),
    (4, 13, 8, 1, 1, 0, 1),
    (6, 25, 7, 3, 1, 2, 2),
    (5, 12, 12, 5, 3, 2, 1),
    (16, 24, 6, 1, 2, 0, 1),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", DENSE, ids=lambda c: "ci{}-co{}-s{}-k{}-st{}-p{}-d{}".format(*c))
def test_dense_conv_on_packed_weights_with_bias_and_relu_equals_torch(case, threads):
    cin, cout, size, k, stride, pad, dil = case
    x, w, b = _rand(2, cin, size, size), _rand(cout, cin, k, k), _rand(cout)
    with mdsl.Graph("dense") as g:
        xi = g.input("x", x.shape)
        y = ops.conv2d(
            xi, g.const("w", w), g.const("b", b), strides=stride, pads=pad, dilations=dil
        )
        g.output(ops.relu(y), "y")
    expect = F.relu(
        F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, pad, dil)
    )
    # the hand-written kernel (tests/runtime/test_onednn_conv.py has oneDNN's); a static
    # build's plan is made by its first call
    with onednn.disabled():
        exe = _compile(g, threads=threads)
        for _ in range(5):  # both team sizes
            np.testing.assert_allclose(exe(x=x)["y"], expect.numpy(), rtol=1e-4, atol=1e-4)
    assert "mdsl_pc_panel(rows" in _kernel_source(exe)


def test_conv_residual_block_with_a_symbolic_batch_equals_the_interpreter():
    c = 8
    w1, w2 = _rand(c, c, 3, 3), _rand(c, c, 3, 3)
    with mdsl.Graph("dense_residual") as g:
        xi = g.input("x", ("N", c, 9, 9))
        h = ops.relu(ops.conv2d(xi, g.const("w1", w1), pads=1))
        g.output(ops.relu(ops.conv2d(h, g.const("w2", w2), pads=1) + xi), "y")
    exe = _compile(g)
    for batch in (1, 3):
        x = _rand(batch, c, 9, 9)
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
        )


@pytest.mark.parametrize("stride", [1, 2])
def test_conv1d_runs_natively_and_equals_torch(stride):
    x, w, b = _rand(2, 6, 31), _rand(10, 6, 3), _rand(10)
    with mdsl.Graph("conv1d") as g:
        xi = g.input("x", x.shape)
        y = ops.conv(xi, g.const("w", w), g.const("b", b), strides=(stride,), pads=(1, 1))
        g.output(ops.sigmoid(y), "y")
    expect = torch.sigmoid(
        F.conv1d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, 1)
    )
    with onednn.disabled():  # the hand-written kernel; oneDNN's is tested below
        exe = _compile(g)
        np.testing.assert_allclose(exe(x=x)["y"], expect.numpy(), rtol=1e-4, atol=1e-4)
    assert not exe.plan.fallbacks
    assert "mdsl_pc_panel(rows" in _kernel_source(exe)
    exe = _compile(g)
    np.testing.assert_allclose(exe(x=x)["y"], expect.numpy(), rtol=1e-4, atol=1e-4)
    assert not exe.plan.fallbacks


# -- grouped 1x1 convolution: one parallel loop over (image, group, row tile) -------------------
GROUPED = [
    # (batch, groups, channels per group in, out, size): work above SMALL_GEMM_FLOPS
    (1, 4, 34, 34, 28),  # ShuffleNet's 136 channels on 28 x 28: one task per group
    (2, 3, 20, 24, 30),  # 6 tasks on 2 threads, output channels differ from input's
    (1, 2, 64, 64, 32),  # each group several row tiles (with a row tail: 32 rows)
    (1, 4, 4, 6, 5),  # small: stays on one thread
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", GROUPED, ids=lambda c: "n{}-g{}-ci{}-co{}-s{}".format(*c))
def test_grouped_1x1_conv_with_a_residual_equals_torch(case, threads):
    batch, groups, cg, coutg, size = case
    c, cout = groups * cg, groups * coutg
    x, w, b = _rand(batch, c, size, size), _rand(cout, cg, 1, 1), _rand(cout)
    r = _rand(batch, cout, size, size)
    with mdsl.Graph("grouped_1x1") as g:
        xi, ri = g.input("x", x.shape), g.input("r", r.shape)
        y = ops.conv2d(xi, g.const("w", w), g.const("b", b), group=groups)
        g.output(ops.relu(y + ri), "y")
    expect = F.relu(F.conv2d(*map(torch.from_numpy, (x, w, b)), groups=groups) + r).numpy()
    exe = _compile(g, threads=threads)
    for _ in range(5):  # both team sizes
        np.testing.assert_allclose(exe(x=x, r=r)["y"], expect, rtol=1e-4, atol=1e-4)
    source = _kernel_source(exe)
    assert "task < " in source
    small = size == 5
    assert ("/* small: one thread */" in source) == small


def test_grouped_1x1_conv_with_a_symbolic_batch_equals_the_interpreter():
    w = _rand(96, 24, 1, 1)
    with mdsl.Graph("grouped_1x1_batch") as g:
        xi = g.input("x", ("N", 96, 24, 24))
        g.output(ops.relu(ops.conv2d(xi, g.const("w", w), group=4)), "y")
    for threads in (1, 2):
        exe = _compile(g, threads=threads)
        assert "task < (4 * dim0)" in _kernel_source(exe)  # parallel over images and groups
        for batch in (1, 3):
            x = _rand(batch, 96, 24, 24)
            for _ in range(5):
                np.testing.assert_allclose(
                    exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
                )


# -- grouped convolutions wider than 1x1: packed weights, group after group ------------------------
GROUPED_PACKED = [
    # (batch, groups, channels per group in, out, size, kernel, stride, pad, dilation)
    (1, 32, 4, 4, 14, 3, 1, 1, 1),  # ResNeXt's: direct over the padded copy
    (2, 3, 5, 14, 11, 3, 2, 1, 1),  # im2col rows per group; 14 output channels: a tail panel
    (1, 4, 8, 8, 12, 3, 1, 2, 2),  # dilated
    (1, 2, 6, 20, 9, 5, 1, 0, 1),  # no padding, 5x5
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "case", GROUPED_PACKED, ids=lambda c: "n{}-g{}-ci{}-co{}-s{}-k{}-st{}-p{}-d{}".format(*c)
)
def test_grouped_conv_on_packed_weights_equals_torch(case, threads):
    batch, groups, cg, coutg, size, k, stride, pad, dil = case
    c, cout = groups * cg, groups * coutg
    x, w, b = _rand(batch, c, size, size), _rand(cout, cg, k, k), _rand(cout)
    expect = F.conv2d(
        *map(torch.from_numpy, (x, w, b)), stride=stride, padding=pad, dilation=dil, groups=groups
    )
    r = _rand(*expect.shape)
    with onednn.disabled(), mdsl.Graph("grouped_packed") as g:
        xi, ri = g.input("x", x.shape), g.input("r", r.shape)
        y = ops.conv2d(
            xi,
            g.const("w", w),
            g.const("b", b),
            group=groups,
            pads=(pad,) * 4,
            strides=(stride, stride),
            dilations=(dil, dil),
        )
        g.output(ops.relu(y + ri), "y")
        exe = _compile(g, threads=threads)
    assert f"for (int64_t g = 0; g < {groups}; g++)" in _kernel_source(exe)
    assert "mdsl_pc_panel(rows" in _kernel_source(exe)
    want = F.relu(expect + torch.from_numpy(r)).numpy()
    for _ in range(5):  # both team sizes
        np.testing.assert_allclose(exe(x=x, r=r)["y"], want, rtol=1e-4, atol=1e-4)


def test_a_grouped_1d_conv_on_packed_weights_equals_torch():
    x, w = _rand(1, 12, 40), _rand(12, 4, 7)
    with onednn.disabled(), mdsl.Graph("grouped_1d") as g:
        g.output(ops.conv(g.input("x", x.shape), g.const("w", w), group=3, pads=(3, 3)), "y")
        exe = _compile(g)
    assert "mdsl_pc_panel(rows" in _kernel_source(exe)
    want = F.conv1d(torch.from_numpy(x), torch.from_numpy(w), padding=3, groups=3).numpy()
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-4, atol=1e-4)


# -- MatMul operands read through a Transpose in place -----------------------------------------------
def _attention_scores(g, q_shape, k_shape, q_perm, k_perm, dtype="float32"):
    q = g.input("q", q_shape, dtype)
    k = g.input("k", k_shape, dtype)
    qv = ops.transpose(q, perm=q_perm) if q_perm else q
    return q, k, ops.matmul(qv, ops.transpose(k, perm=k_perm))


TRANSPOSED = {
    # id: (q shape, k shape, q perm, k perm, dtype)
    "k-transposed": ((2, 3, 5, 4), (2, 3, 5, 4), None, (0, 1, 3, 2), "float32"),
    "heads-split": ((2, 5, 3, 4), (2, 5, 3, 4), (0, 2, 1, 3), (0, 2, 3, 1), "float32"),
    "broadcast-batch": ((3, 5, 4), (2, 3, 6, 4), None, (0, 1, 3, 2), "float32"),
    "matrix-reversed": ((5, 4), (6, 4), None, None, "float64"),
}


@pytest.mark.parametrize("key", list(TRANSPOSED))
def test_matmul_reads_transposed_operands_in_place(key):
    q_shape, k_shape, q_perm, k_perm, dtype = TRANSPOSED[key]
    with mdsl.Graph(f"qk_{key.replace('-', '_')}") as g:
        _, _, s = _attention_scores(g, q_shape, k_shape, q_perm, k_perm, dtype)
        g.output(ops.softmax(s, axis=-1), "p")
    exe = _compile(g)
    assert "(Transpose) at" not in _kernel_source(exe)  # no transposed copy
    feeds = {"q": _rand(*q_shape).astype(dtype), "k": _rand(*k_shape).astype(dtype)}
    np.testing.assert_allclose(
        exe(**feeds)["p"], mdsl.interpret(g, feeds)["p"], rtol=1e-5, atol=1e-6
    )


def test_a_transpose_read_elsewhere_too_is_still_computed():
    with mdsl.Graph("qk_shared") as g:
        _, k, s = _attention_scores(g, (2, 5, 4), (2, 5, 4), None, (0, 2, 1))
        g.output(s, "s")
        g.output(ops.transpose(k, perm=(0, 2, 1)) * 2.0, "kt2")
    exe = _compile(g)
    feeds = {"q": _rand(2, 5, 4), "k": _rand(2, 5, 4)}
    got, want = exe(**feeds), mdsl.interpret(g, feeds)
    for name in ("s", "kt2"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


# -- compiling in mdsl.compile, not silently on a first call -------------------------------------------
def test_a_symbolic_graph_compiles_in_mdsl_compile_and_its_first_call_builds_nothing(caplog):
    g = _matmul_graph(("N", 16), (16, 8), None, "eager_symbolic")
    exe = _compile(g)
    assert list(exe.variants()) == [()]  # built before any call
    assert "mdsl_run_dims" in _kernel_source(exe)
    with caplog.at_level("INFO", logger="mdsl.compile"):
        exe(a=_rand(3, 16))
    assert not caplog.records


def test_a_variant_built_on_a_first_call_says_so(caplog):
    g = _matmul_graph(("N", 16), (16, 8), None, "per_signature")
    exe = _compile(g, specialize=True)
    with caplog.at_level("INFO", logger="mdsl.compile"):
        exe(a=_rand(3, 16))
        exe(a=_rand(3, 16))
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "compiling 'per_signature' for N=3 (a c variant, built on the first call of this signature)"
    ]
