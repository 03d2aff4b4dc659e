"""Convolutions computed by oneDNN in the C target (`mdsl.codegen.onednn`) against
PyTorch and the interpreter, and the hand-written kernels they replace: both paths run
where oneDNN is installed; without it the C target keeps its own kernels."""

from __future__ import annotations

import contextlib
import ctypes
import json
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import onednn
from tests.runtime.machine import needs_avx512

RNG = np.random.default_rng(1617)
needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)


KEPT = r"(NHWC|nChw\d+c)"  # the layouts oneDNN's kernels keep tensors in between them


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _source(exe) -> str:
    return "\n".join(exe.sources.values())


CASES = [
    # (cin, cout, size, kernel, stride, pad, dilation, group, residual)
    (16, 16, 12, 3, 1, 1, 1, 1, True),
    (3, 8, 17, 7, 2, 3, 1, 1, False),  # a ResNet stem
    (8, 16, 11, 3, 2, 1, 1, 1, False),
    (64, 64, 9, 3, 1, 2, 2, 4, False),  # grouped, dilated
    (32, 48, 10, 5, 3, 0, 1, 2, False),  # no padding, stride 3, uneven end
    (256, 256, 6, 1, 1, 0, 1, 1, True),  # a lone 1x1 with much arithmetic per pixel
    (256, 512, 7, 1, 1, 0, 1, 1, False),  # and another on a small plane
]


def _graph(case, x_shape, w, b):
    *_, stride, pad, dil, group, residual = case
    with mdsl.Graph("conv") as g:
        xi = g.input("x", x_shape)
        y = ops.conv2d(
            xi,
            g.const("w", w),
            g.const("b", b),
            strides=stride,
            pads=pad,
            dilations=dil,
            group=group,
        )
        if residual:
            y = y + xi
        g.output(ops.relu(y), "y")
    return g


def _torch(case, x, w, b):
    _, _, _, _, stride, pad, dil, group, residual = case
    y = F.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, pad, dil, group
    )
    return F.relu(y + torch.from_numpy(x) if residual else y).numpy()


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "ci{}-co{}-s{}-k{}-st{}-p{}-d{}-g{}-r{}".format(*c)
)
def test_conv_by_onednn_with_bias_relu_and_residual_equals_torch(case, threads):
    cin, cout, size, k, *_, group, _r = case
    x, w, b = _rand(2, cin, size, size), _rand(cout, cin // group, k, k), _rand(cout)
    g = _graph(case, x.shape, w, b)
    exe = mdsl.compile(g, "c", threads=threads)
    assert "mdsl_dnnl_conv_run(" in _source(exe)
    expect = _torch(case, x, w, b)
    for _ in range(5):  # the first call makes the primitive; both team sizes run
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)
    with onednn.disabled():  # a static build's plan is made by its first call
        hand = mdsl.compile(g, "c", threads=threads)
        mine = hand(x=x)["y"]
    assert "mdsl_dnnl" not in _source(hand)
    np.testing.assert_allclose(mine, expect, rtol=1e-4, atol=1e-4)


CONV1D = [
    # (channels, length, kernel, stride, pad, asked in nCw16c): stride x channels x 4 bytes
    # a multiple of 4 KiB with overlapping windows (`packing.activation_tag`), or not
    (256, 403, 5, 4, 2, True),
    (256, 400, 4, 4, 0, False),  # windows that do not overlap
    (192, 403, 5, 4, 2, False),  # 3 KiB apart
]


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CONV1D, ids=lambda c: "c{}-t{}-k{}-s{}-p{}".format(*c[:5]))
def test_a_1d_conv_chain_in_the_layout_asked_for_equals_torch(case, threads):
    c, length, k, stride, pad, asked = case
    x = _rand(2, c, length)
    w1, w2, b = _rand(c, c, k) * 0.05, _rand(c, c, 3) * 0.05, _rand(c)
    with mdsl.Graph("conv1d_chain") as g:
        xi = g.input("x", x.shape)
        h = ops.gelu(
            ops.conv(xi, g.const("w1", w1), g.const("b", b), strides=(stride,), pads=(pad, pad))
        )
        g.output(ops.relu(ops.conv(h, g.const("w2", w2), pads=(1, 1))), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert ("asked in nChw16c" in _source(exe)) == asked
    xt = torch.from_numpy(x)
    h = F.gelu(F.conv1d(xt, torch.from_numpy(w1), torch.from_numpy(b), stride, pad))
    expect = F.relu(F.conv1d(h, torch.from_numpy(w2), None, 1, 1)).numpy()
    for _ in range(5):  # both team sizes run
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize(
    ("cin", "cout", "size", "stride", "by_onednn"),
    [
        (128, 512, 8, 1, False),  # 102 of arithmetic per element reordered: too little
        (256, 256, 8, 1, True),  # 128 on a plane of 64
        (256, 256, 20, 1, False),  # on a plane of 400: the strips are nearly all full
        (256, 512, 16, 2, False),  # strided: the input to reorder is 4x the output
    ],
)
def test_a_lone_1x1_conv_goes_to_onednn_by_its_arithmetic_and_plane(
    cin, cout, size, stride, by_onednn
):
    """`packing.dense_1x1`: Cin * Cout / (Cin + Cout) >= 128 on a stride-1 plane of at
    most 256 positions goes to oneDNN (384 -> 384 on 14x14: 1.01x ORT against 1.17x for
    the hand-written kernel); the rest keep the hand-written kernel (256 -> 512 on 28x28
    0.97x against 1.09x)."""
    x = _rand(1, cin, size, size)
    with mdsl.Graph("lone_1x1") as g:
        w = g.const("w", _rand(cout, cin, 1, 1))
        g.output(ops.conv2d(g.input("x", x.shape), w, strides=stride), "y")
    exe = mdsl.compile(g, "c")
    assert ("mdsl_dnnl_conv_run(" in _source(exe)) == by_onednn
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
    )


@needs_onednn
def test_lone_1x1_depthwise_and_im2col_convs_keep_the_hand_written_kernels():
    x = _rand(1, 12, 10, 10)
    with mdsl.Graph("kept") as g:
        xi = g.input("x", x.shape)
        a = ops.conv2d(xi, g.const("w1", _rand(12, 12, 1, 1)))
        b = ops.conv2d(xi, g.const("w2", _rand(12, 1, 3, 3)), pads=1, group=12)
        # 3 channels per group: oneDNN would run its im2col `gemm` kernel
        c = ops.conv2d(xi, g.const("w3", _rand(12, 3, 3, 3)), pads=1, group=4)
        g.output(a + b + c, "y")
    exe = mdsl.compile(g, "c")
    assert "mdsl_dnnl" not in _source(exe)
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
    )


def _inverted_residual(c, e, size):
    """MobileNetV2's block: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 project, Add."""
    w = (_rand(e, c, 1, 1) * 0.3, _rand(e), _rand(e, 1, 3, 3) * 0.3, _rand(e))
    w += (_rand(c, e, 1, 1) * 0.3, _rand(c))
    with mdsl.Graph("mbv2") as g:
        xi = g.input("x", (1, c, size, size))
        h = ops.clip(ops.conv2d(xi, g.const("we", w[0]), g.const("be", w[1])), 0.0, 6.0)
        h = ops.conv2d(h, g.const("wd", w[2]), g.const("bd", w[3]), pads=1, group=e)
        h = ops.conv2d(ops.clip(h, 0.0, 6.0), g.const("wp", w[4]), g.const("bp", w[5]))
        g.output(h + xi, "y")
    return g, w


@needs_onednn
def test_a_mobilenet_block_runs_blocked_on_onednn_and_equals_torch():
    g, w = _inverted_residual(16, 96, 12)
    exe = mdsl.compile(g, "c", threads=2)
    src = _source(exe)
    assert src.count("oneDNN brgconv_1x1") == 2 and src.count("oneDNN brdgmm_dw") == 1
    assert len(re.findall(rf"x {KEPT}", src)) == 2 and len(re.findall(rf"-> {KEPT};", src)) == 2
    assert src.count("bias, clip fused") == 2 and "bias, sum fused" in src
    x = _rand(1, 16, 12, 12)
    t = lambda a: torch.from_numpy(a)  # noqa: E731
    h = F.conv2d(t(x), t(w[0]), t(w[1])).clamp(0, 6)
    h = F.conv2d(h, t(w[2]), t(w[3]), padding=1, groups=96).clamp(0, 6)
    expect = (F.conv2d(h, t(w[4]), t(w[5])) + t(x)).numpy()
    for _ in range(3):
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], expect, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_residual_block_by_onednn_equals_the_interpreter_and_a_symbolic_batch_is_specialized():
    c = 16
    w1, w2 = _rand(c, c, 3, 3), _rand(c, c, 3, 3)
    with mdsl.Graph("block") as g:
        xi = g.input("x", ("N", c, 9, 9))
        h = ops.relu(ops.conv2d(xi, g.const("w1", w1), pads=1))
        g.output(ops.relu(ops.conv2d(h, g.const("w2", w2), pads=1) + xi), "y")
    exe = mdsl.compile(g, "c")
    for batch in (1, 3):
        x = _rand(batch, c, 9, 9)
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
        )


def test_without_onednn_plans_use_the_hand_written_kernels():
    x, w = _rand(1, 4, 8, 8), _rand(4, 4, 3, 3)
    with mdsl.Graph("hand") as g:
        g.output(ops.conv2d(g.input("x", x.shape), g.const("w", w), pads=1), "y")
    with onednn.disabled():
        assert not onednn.available()
        exe = mdsl.compile(g, "c")
        y = exe(x=x)["y"]
    assert "mdsl_dnnl" not in _source(exe)
    assert "mdsl_pc_panel(rows" in _source(exe)
    np.testing.assert_allclose(y, mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4)


def _basic_blocks(c, size, blocks=2):
    """ResNet basic blocks (3x3 conv, bias, ReLU, 3x3 conv, bias, residual Add, ReLU)."""
    weights = [(_rand(c, c, 3, 3) * 0.2, _rand(c)) for _ in range(2 * blocks)]
    with mdsl.Graph("blocks") as g:
        y = g.input("x", (2, c, size, size))
        for i in range(blocks):
            (w1, b1), (w2, b2) = weights[2 * i : 2 * i + 2]
            h = ops.relu(ops.conv2d(y, g.const(f"w{i}a", w1), g.const(f"b{i}a", b1), pads=1))
            y = ops.relu(ops.conv2d(h, g.const(f"w{i}b", w2), g.const(f"b{i}b", b2), pads=1) + y)
        g.output(y, "y")
    return g, weights


def _torch_blocks(x, weights):
    y = torch.from_numpy(x)
    for i in range(0, len(weights), 2):
        (w1, b1), (w2, b2) = weights[i : i + 2]
        h = F.relu(F.conv2d(y, torch.from_numpy(w1), torch.from_numpy(b1), padding=1))
        y = F.relu(F.conv2d(h, torch.from_numpy(w2), torch.from_numpy(b2), padding=1) + y)
    return y.numpy()


@needs_onednn
@pytest.mark.parametrize("c", [16, 24])  # 24: channels padded to the block
def test_resnet_blocks_stay_blocked_between_convolutions_and_equal_torch(c):
    g, weights = _basic_blocks(c, 10)
    exe = mdsl.compile(g, "c", threads=2)
    src = _source(exe)
    # the first convolution reads the NCHW input and keeps it reordered for the first
    # residual, the last writes the NCHW output; every tensor between them stays blocked
    assert src.count("oneDNN brgconv") == 4
    assert len(re.findall(rf"-> {KEPT};", src)) == 3 and src.count("-> NCHW;") == 1
    assert len(re.findall(rf"x {KEPT}", src)) == 3
    assert len(re.findall(rf"kept in {KEPT} for other kernels", src)) == 1
    assert len(re.findall(rf"residual {KEPT}", src)) == 2
    assert src.count("bias, sum, relu fused") == 2 and "for (int64_t nco" not in src
    # the first block's result is computed over its residual (read last there), and the
    # last convolution computes in the second residual's buffer, then reorders to NCHW
    assert len(exe.plan.memory.aliases) == 1
    assert len(re.findall(rf"residual {KEPT} \(the destination\) -> NCHW", src)) == 1
    x = _rand(2, c, 10, 10)
    expect = _torch_blocks(x, weights)
    for _ in range(3):
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], expect, rtol=1e-4, atol=1e-4)
    with onednn.disabled():
        hand = mdsl.compile(g, "c")
        np.testing.assert_allclose(hand(x=x)["y"], expect, rtol=1e-4, atol=1e-4)
    assert "mdsl_dnnl" not in _source(hand)


@pytest.mark.parametrize("use_onednn", [pytest.param(True, marks=needs_onednn), False])
def test_a_call_whose_team_ends_between_kernels_equals_torch(monkeypatch, use_onednn):
    """A whole-team call that has lost against one thread runs its remaining kernels on
    one (team.h.j2, mdsl_team_checkpoint). Built with a margin no team can win by, every
    whole-team call after the first ones ends its team after its first kernel: the
    kernels after it pick their one-thread work and primitives, and the blocked tensors
    between them, written by the team, must read the same. The calling thread's OpenMP
    setting shows where the team ended (a whole-team call leaves it at 2)."""
    monkeypatch.setenv("MDSL_CFLAGS", "-DMDSL_TEAM_MARGIN=1e9")
    g, weights = _basic_blocks(13, 9)
    gomp = ctypes.CDLL("libgomp.so.1")
    with contextlib.nullcontext() if use_onednn else onednn.disabled():
        exe = mdsl.compile(g, "c", threads=2)
    assert ("mdsl_dnnl" in _source(exe)) == use_onednn
    assert _source(exe).count("mdsl_team_checkpoint(team_call);") == len(exe.plan.kernels) - 1 >= 2
    xs = [_rand(2, 13, 9, 9) for _ in range(16)]
    teams, got = [], []
    for x in xs:
        got.append(exe(x=x)["y"])
        teams.append(gomp.omp_get_max_threads())
    for x, y in zip(xs, got):
        np.testing.assert_allclose(y, _torch_blocks(x, weights), rtol=1e-4, atol=1e-4)
    # the first call runs on the whole team unless the run queue shows no processor free
    # (then the second does): one of the first two leaves the team's setting
    assert sorted(teams[:2]) == [1, 2]
    assert teams[2:4] == [1, 1]  # the fourth call, warm on the team, lost after a kernel
    assert teams[4:].count(2) == 0


@needs_onednn
def test_a_tensor_read_by_another_kernel_stays_nchw_and_a_clip_is_a_post_op():
    c = 16
    w1, w2 = _rand(c, c, 3, 3) * 0.2, _rand(c, c, 3, 3) * 0.2
    with mdsl.Graph("mixed") as g:
        xi = g.input("x", (1, c, 8, 8))
        h = ops.clip(ops.conv2d(xi, g.const("w1", w1), pads=1), 0.0, 6.0)
        g.output(ops.conv2d(h, g.const("w2", w2), pads=1), "y")
        g.output(ops.max_pool(h, (2, 2), strides=(2, 2)), "p")  # h is read by a pool too
    exe = mdsl.compile(g, "c")
    src = _source(exe)
    assert "x NCHW -> NCHW; clip fused" in src and not re.search(rf"x {KEPT}", src)
    x = _rand(1, c, 8, 8)
    got, expect = exe(x=x), mdsl.interpret(g, {"x": x})
    for name in ("y", "p"):
        np.testing.assert_allclose(got[name], expect[name], rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_pool_and_concat_chain_stays_in_onednn_layouts_and_equals_torch():
    """conv -> max pool (ceil mode) -> two branches -> channel Concat -> conv -> average
    pool -> conv: every tensor between the input and the output stays in oneDNN's layout."""
    w = [_rand(32, 8, 3, 3) * 0.3, _rand(16, 32, 1, 1) * 0.3, _rand(16, 32, 3, 3) * 0.2]
    w += [_rand(24, 32, 3, 3) * 0.2, _rand(8, 24, 1, 1) * 0.3]
    b = [_rand(x.shape[0]) for x in w]
    with mdsl.Graph("inception") as g:
        xi = g.input("x", (2, 8, 15, 15))
        c = lambda h, i, **kw: ops.relu(  # noqa: E731
            ops.conv2d(h, g.const(f"w{i}", w[i]), g.const(f"b{i}", b[i]), **kw)
        )
        h = ops.max_pool(c(xi, 0, pads=1), 3, strides=2, ceil_mode=True)
        h = ops.concat([c(h, 1), c(h, 2, pads=1)], axis=1)
        h = ops.average_pool(c(h, 3, pads=1), 3, strides=2, pads=1)  # padding not counted
        g.output(c(h, 4), "y")
    exe = mdsl.compile(g, "c", threads=2)
    src = _source(exe)
    assert re.search(rf"max pooling by hand: {KEPT} -> {KEPT}", src)
    assert re.search(rf"oneDNN avg pooling: {KEPT} -> {KEPT}", src)
    assert len(re.findall(rf"x {KEPT}", src)) == 4 and src.count("x NCHW") == 1
    x = _rand(2, 8, 15, 15)
    t = lambda a: torch.from_numpy(a)  # noqa: E731
    tc = lambda h, i, p=0: F.relu(F.conv2d(h, t(w[i]), t(b[i]), padding=p))  # noqa: E731
    h = F.max_pool2d(tc(t(x), 0, 1), 3, 2, ceil_mode=True)
    h = torch.cat([tc(h, 1), tc(h, 2, 1)], 1)
    h = F.avg_pool2d(tc(h, 3, 1), 3, 2, 1, count_include_pad=False)
    expect = tc(h, 4).numpy()
    for _ in range(3):
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mdsl.interpret(g, {"x": x})["y"], expect, rtol=1e-4, atol=1e-4)


def _team_graph(size=14):
    """A 1x1 convolution oneDNN blocks differently at 1 and 2 threads, then a 3x3 one."""
    w1, w2 = _rand(512, 1024, 1, 1) * 0.05, _rand(64, 512, 3, 3) * 0.05
    with mdsl.Graph("team") as g:
        xi = g.input("x", (1, 1024, size, size))
        h = ops.conv2d(ops.conv2d(xi, g.const("w1", w1)), g.const("w2", w2), pads=1)
        g.output(h, "y")
    t = lambda a: torch.from_numpy(a)  # noqa: E731
    return g, lambda x: F.conv2d(F.conv2d(t(x), t(w1)), t(w2), padding=1).numpy()


@needs_avx512
@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_weights_are_reordered_into_the_layout_of_the_primitive_the_call_makes(threads):
    """oneDNN blocks a 1x1 convolution's weights by the team size the primitive is made
    at (this one differently at 1 and 2 threads): the plan reorders them for each, and
    each call's primitive (one thread, or the whole team: the team choice alternates
    them on its first calls) reads its own. Weights of the other team size, read in the
    wrong layout, give wrong results."""
    g, torch_y = _team_graph()
    exe = mdsl.compile(g, "c", threads=threads)
    src = _source(exe)
    assert "oneDNN brgconv_1x1" in src
    if onednn.plan_threads() == 2:  # this machine's blockings at 1 and 2 threads
        assert "static const mdsl_dnnl_weights weights[2]" in src
    for _ in range(6):
        x = _rand(1, 1024, 14, 14)
        np.testing.assert_allclose(exe(x=x)["y"], torch_y(x), rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_team_size_the_plan_did_not_reorder_for_falls_back_to_one_it_did(monkeypatch):
    """Weights reordered only for one thread: a whole-team call, whose primitive would
    block them otherwise, gets a primitive made for one thread instead of failing."""
    monkeypatch.setattr(onednn, "team_sizes", lambda: (1,))
    g, torch_y = _team_graph(size=13)
    exe = mdsl.compile(g, "c", threads=2)
    assert "static const mdsl_dnnl_weights weights[2]" not in _source(exe)
    for _ in range(6):
        x = _rand(1, 1024, 13, 13)
        np.testing.assert_allclose(exe(x=x)["y"], torch_y(x), rtol=1e-4, atol=1e-4)


def _primitives_made(capfd, run) -> dict[str, int]:
    """How many oneDNN primitives of each kind `run()` made (oneDNN's verbose log of
    primitive creation, cache hits included)."""
    lib = ctypes.CDLL(str(onednn.library_path()))
    capfd.readouterr()
    if lib.dnnl_set_verbose(2) != 0:
        pytest.skip("this oneDNN was built without its verbose log")
    try:
        run()
    finally:
        lib.dnnl_set_verbose(0)
        ctypes.CDLL(None).fflush(None)
    made = re.findall(r"create:cache_(?:hit|miss),cpu,(\w+),", capfd.readouterr().out)
    return {kind: made.count(kind) for kind in set(made)}


@needs_onednn
@pytest.mark.skipif(onednn.plan_threads() < 2, reason="one processor: one team size")
def test_calls_on_one_thread_and_on_the_team_each_have_their_primitives(capfd):
    """A primitive runs on the team size it was made at: one made by the first call (a
    one-thread probe of the team choice) would run every later whole-team call on one
    thread. Each convolution and pooling makes one primitive per team size, and every
    call, alternating team sizes, equals the interpreter."""
    w1, w2 = _rand(24, 12, 3, 3) * 0.2, _rand(24, 24, 3, 3) * 0.2
    with mdsl.Graph("teams") as g:
        xi = g.input("x", (1, 12, 11, 11))
        h = ops.average_pool(ops.relu(ops.conv2d(xi, g.const("w1", w1), pads=1)), 2, strides=1)
        g.output(ops.conv2d(h, g.const("w2", w2), pads=1), "y")
    exe = mdsl.compile(g, "c", threads=2)
    assert re.search(rf"oneDNN avg pooling: {KEPT}", _source(exe))
    xs = [_rand(1, 12, 11, 11) for _ in range(6)]
    got = []
    made = _primitives_made(capfd, lambda: got.extend(exe(x=x)["y"] for x in xs))
    assert made.get("convolution") == 4 and made.get("pooling") == 2
    for x, y in zip(xs, got):
        np.testing.assert_allclose(y, mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_saved_executable_names_onednn_and_refuses_to_load_where_it_is_missing(
    tmp_path, monkeypatch
):
    x, w = _rand(1, 16, 9, 9), _rand(16, 16, 3, 3)
    with mdsl.Graph("saved_conv") as g:
        g.output(ops.relu(ops.conv2d(g.input("x", x.shape), g.const("w", w), pads=1)), "y")
    exe = mdsl.compile(g, "c")
    expect = exe(x=x)["y"]
    [variant] = exe.variants().values()
    assert str(onednn.library_path()) in variant.linked_libraries()
    exe.save(tmp_path / "conv.exe")
    [entry] = json.loads((tmp_path / "conv.exe" / "manifest.json").read_text())["variants"]
    # found by name where it is loaded, not at this machine's path
    assert entry["system_libraries"] == [onednn.SONAME] and entry["custom_libraries"] == []
    np.testing.assert_array_equal(mdsl.load_executable(tmp_path / "conv.exe")(x=x)["y"], expect)
    monkeypatch.setattr(onednn, "library_path", lambda: None)  # a machine without the wheel
    with pytest.raises(mdsl.CompileError, match=r"links libdnnl\.so\.3, which is not installed"):
        mdsl.load_executable(tmp_path / "conv.exe")


@needs_onednn
def test_weights_of_another_layout_than_the_primitive_chooses_fail_the_call(monkeypatch):
    """Two blockings of one size (weights by 32 or by 64 output channels, which oneDNN
    picks by team size or machine) are told apart by their layout words: reordered
    weights the primitive would read in another layout fail the call with an error."""
    real = onednn._Conv.layout_words
    monkeypatch.setattr(onednn._Conv, "layout_words", lambda s, what: (*real(s, what)[:-1], 7))
    monkeypatch.setenv("MDSL_WINOGRAD", "0")  # Winograd keeps no weights of oneDNN's
    w = _rand(64, 64, 3, 3) * 0.05
    with mdsl.Graph("layout") as g:
        g.output(ops.conv2d(g.input("x", (1, 64, 28, 28)), g.const("w", w), pads=1), "y")
    exe = mdsl.compile(g, "c", threads=1)
    assert "oneDNN" in _source(exe)
    with pytest.raises(mdsl.MdslError):
        exe(x=_rand(1, 64, 28, 28))


def _two_branches(cin, cout, size, also_nchw):
    """Two 3x3 stride-2 convolutions of one NCHW input, the first one's result the second
    one's residual; with `also_nchw` an element-wise kernel reads the input too, as the
    graph's second output."""
    w1, w2 = _rand(cout, cin, 3, 3) * 0.2, _rand(cout, cin, 3, 3) * 0.2
    with mdsl.Graph("branches") as g:
        x = g.input("x", (2, cin, size, size))
        h = ops.relu(ops.conv2d(x, g.const("w1", w1), strides=2, pads=1))
        g.output(ops.relu(ops.conv2d(x, g.const("w2", w2), strides=2, pads=1) + h), "y")
        if also_nchw:
            g.output(x * 2.0, "x2")
    return g


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c", [16, 13])  # 13: off every block of oneDNN's
def test_a_block_input_read_by_two_convolutions_is_reordered_once(c, threads):
    """The first convolution keeps its reordered source for the residual's sum, and the
    last one computes in that copy (read last there) before its reorder to NCHW."""
    g, _ = _basic_blocks(c, 9, blocks=1)
    exe = mdsl.compile(g, "c", threads=threads)
    src = _source(exe)
    assert len(re.findall(rf"x NCHW \(kept in {KEPT} for other kernels\)", src)) == 1
    assert len(re.findall(rf"residual {KEPT} \(the destination\) -> NCHW", src)) == 1
    for _ in range(3):  # a second call finds the copy holding the last call's result
        x = _rand(2, c, 9, 9)
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
        )


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("also_nchw", [False, True])
def test_an_input_two_convolutions_read_is_reordered_once(also_nchw, threads):
    g = _two_branches(24, 40, 11, also_nchw)
    exe = mdsl.compile(g, "c", threads=threads)
    src = _source(exe)
    assert len(re.findall(rf"kept in {KEPT} for other kernels", src)) == 1
    assert (
        len(re.findall(rf"oneDNN [^:]*:[^:]*: x {KEPT}, residual {KEPT} \(the destination\)", src))
        == 1
    )
    for _ in range(2):
        x = _rand(2, 24, 11, 11)
        got, want = exe(x=x), mdsl.interpret(g, {"x": x})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("c", [8, 13])
def test_a_convolution_whose_residual_is_its_source_does_not_compute_over_it(c, relu, threads):
    """`h = conv(h) + h` twice: the second convolution's residual, kept in its
    destination's layout, is also its source, so it must not compute in that buffer
    (it did: wrong results from the second layer on)."""
    rng = np.random.default_rng(c)
    with mdsl.Graph("self residual") as g:
        h = g.input("x", (1, c, 13, 13))
        for i in range(3):
            y = ops.conv2d(h, g.const(f"w{i}", _rand(c, c, 3, 3) / c), pads=1)
            h = (ops.relu(y) if relu else y) + h
        g.output(h, "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert [k.kind for k in exe.kernels] == ["convolution (oneDNN) + epilogue"] * 3
    for _ in range(2):
        x = rng.standard_normal((1, c, 13, 13)).astype(np.float32)
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
        )
