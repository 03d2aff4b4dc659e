"""3x3 convolutions the C target computes as Winograd F(2x2, 3x3) (`mdsl.codegen.winograd`,
`csrc/templates/c/winograd.h.j2`) against PyTorch and the interpreter: odd sizes (tiles
cut at the image's edge), strips of tiles cut at a row's end, rows of the product kernel
and output channel vectors left over, batch 2, 1 and 2 threads, and each post-op."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import kir, onednn, winograd

RNG = np.random.default_rng(2020)
pytestmark = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)
WINOGRAD = "computed as Winograd F(2x2, 3x3)"


@pytest.fixture(autouse=True)
def any_expected_ratio(monkeypatch):
    """The kernel's cases are small and odd on purpose (edges, strips cut short), where
    the cost rule (`winograd.expected_ratio`) would keep oneDNN: here it does not."""
    monkeypatch.setattr(winograd, "MAX_EXPECTED_RATIO", float("inf"))


def _rand(*shape, scale=1.0):
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def _source(exe) -> str:
    return "\n".join(exe.sources.values())


def _conv_graph(x_shape, w, b, post):
    with mdsl.Graph("wino") as g:
        x = g.input("x", x_shape)
        y = ops.conv2d(x, g.const("w", w), None if b is None else g.const("b", b), pads=1)
        if post == "relu":
            y = ops.relu(y)
        elif post == "clip":
            y = ops.clip(y, -0.5, 2.0)
        elif post == "residual":  # ReLU, the residual, ReLU: as the DSL's ResNet block
            y = ops.relu(ops.relu(y) + x)
        g.output(y, "y")
    return g


def _torch(x, w, b, post):
    bias = None if b is None else torch.from_numpy(b).double()
    t = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), bias, padding=1)
    if post == "relu":
        t = F.relu(t)
    elif post == "clip":
        t = t.clamp(-0.5, 2.0)
    elif post == "residual":
        t = F.relu(F.relu(t) + torch.from_numpy(x).double())
    return t.numpy()


CASES = [
    # (batch, cin, cout, height, width, post-op)
    (1, 32, 32, 7, 9, "relu"),  # odd height and width: tiles cut at both edges
    (2, 32, 48, 5, 1, "clip"),  # one column; 48 outputs: a row of 3 vectors; clip(-0.5, 2)
    (2, 48, 48, 6, 13, "residual"),  # the residual summed in the destination
    (1, 64, 64, 9, 33, "none"),  # 15 tiles a strip (6 + 6 + 3 rows), then 2; no bias
    (1, 512, 32, 3, 9, "relu"),  # 1 MiB of weights: one strip on the heap; 2 threads: a panel each
    (2, 32, 80, 1, 2, "relu"),  # one row of one tile; 80 outputs: 64 + 16
    (2, 256, 256, 9, 11, "residual"),  # 4 MiB of weights: strips of 32 tiles across rows and images
    (1, 48, 32, 5, 35, "relu"),  # strips of 25 tiles on the stack, across a row's end
    (1, 256, 64, 17, 17, "relu"),  # 81 tiles, weights past L2: strips of 32 at 1 and 2 threads
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}-ci{}-co{}-{}x{}-{}".format(*c))
def test_winograd_conv_equals_torch_and_the_interpreter_at_1_and_2_threads(case):
    n, cin, cout, h, w_, post = case
    x = _rand(n, cin, h, w_)
    w, b = _rand(cout, cin, 3, 3, scale=(9 * cin) ** -0.5), _rand(cout)
    if post == "none":
        b = None
    if post == "residual":
        assert cin == cout
    g = _conv_graph(x.shape, w, b, post)
    expect = _torch(x, w, b, post)
    interpreted = mdsl.interpret(g, {"x": x})["y"]
    for threads in (1, 2):
        exe = mdsl.compile(g, "c", threads=threads)
        assert WINOGRAD in _source(exe)
        for _ in range(2):  # the first call makes the primitive
            got = exe(x=x)["y"]
            np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got, interpreted, rtol=1e-5, atol=1e-5)


GROUPED = [
    # (batch, cin, cout, groups, height, width)
    (2, 64, 64, 2, 6, 7),  # 32 channels a group; strips on the stack
    (1, 192, 192, 3, 14, 15),  # RegNet's 64 a group; 786 KiB of weights: strips of 32 on the heap
    (1, 336, 336, 7, 5, 5),  # 48 a group, weights past L2, 9 tiles: 2 threads split the panels
]  # inside a group (21 panels: 10 and 11)


@pytest.mark.parametrize("case", GROUPED, ids=lambda c: "n{}-c{}-co{}-g{}-{}x{}".format(*c))
def test_grouped_winograd_conv_equals_torch_at_1_and_2_threads(case):
    n, cin, cout, groups, h, w_ = case
    x, b = _rand(n, cin, h, w_), _rand(cout)
    w = _rand(cout, cin // groups, 3, 3, scale=(9 * cin // groups) ** -0.5)
    with mdsl.Graph("grouped_wino") as g:
        xi = g.input("x", x.shape)
        y = ops.conv2d(xi, g.const("w", w), g.const("b", b), pads=1, group=groups)
        g.output(ops.relu(y), "y")
    t = F.conv2d(*(torch.from_numpy(a).double() for a in (x, w, b)), padding=1, groups=groups)
    expect = F.relu(t).numpy()
    for threads in (1, 2):
        exe = mdsl.compile(g, "c", threads=threads)
        assert WINOGRAD in _source(exe)
        for _ in range(2):  # the first call makes the primitive
            np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[5]], ids=["co48", "co64", "co80"])
def test_the_portable_build_without_avx512_equals_torch(case):
    """`march_native=False` builds for any x86-64 (SSE2 only), so the kernel takes the
    8-float vectors and 6 x 2 register blocks of machines without AVX-512 wherever it
    runs (tests/runtime/test_avx2_builds.py runs that form with AVX2)."""
    n, cin, cout, h, w_, post = case
    x = _rand(n, cin, h, w_)
    w = _rand(cout, cin, 3, 3, scale=(9 * cin) ** -0.5)
    b = None if post == "none" else _rand(cout)
    exe = mdsl.compile(_conv_graph(x.shape, w, b, post), "c", threads=2, march_native=False)
    assert WINOGRAD in _source(exe)
    np.testing.assert_allclose(exe(x=x)["y"], _torch(x, w, b, post), rtol=1e-5, atol=1e-5)


def _basic_block(n, c, size):
    """The DSL's ResNet basic block (examples/resnet_block.py) with random weights and
    batch norm statistics: both convolutions Winograd, the input kept in NHWC."""
    from examples.resnet_block import build

    g = build(batch=n, channels=c, size=size)
    for node in g.constants:
        shape = tuple(node.outputs[0].shape)
        value = _rand(*shape, scale=0.1) if len(shape) == 4 else _rand(*shape, scale=0.1) + 1
        node.attrs["value"] = np.abs(value) if node.name.endswith("var") else value
    return g


@pytest.mark.parametrize("threads", [1, 2])
def test_a_resnet_block_of_winograd_convs_equals_the_interpreter(threads):
    g = _basic_block(2, 32, 11)
    x = _rand(2, 32, 11, 11)
    exe = mdsl.compile(g, "c", threads=threads)
    assert _source(exe).count(WINOGRAD) == 2
    expect = mdsl.interpret(g, {"x": x})["y"]
    for _ in range(3):  # the second convolution sums into the kept input's buffer
        np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "cin, cout, stride, dilation, size",
    [
        (16, 16, 1, 1, 8),
        (32, 24, 1, 1, 8),
        (32, 32, 2, 1, 8),
        (32, 32, 1, 2, 8),
    ],
    ids=["16x16-channels", "24-outputs", "stride-2", "dilated"],
)
def test_convs_outside_the_rule_keep_onednn_and_equal_torch(cin, cout, stride, dilation, size):
    x, w, b = _rand(1, cin, size, size), _rand(cout, cin, 3, 3, scale=0.1), _rand(cout)
    with mdsl.Graph("direct") as g:
        xi = g.input("x", x.shape)
        y = ops.conv2d(
            xi,
            g.const("w", w),
            g.const("b", b),
            strides=stride,
            pads=dilation,
            dilations=dilation,
        )
        g.output(ops.relu(y), "y")
    exe = mdsl.compile(g, "c", threads=1)
    assert "mdsl_dnnl_conv_run(" in _source(exe) and WINOGRAD not in _source(exe)
    expect = F.relu(
        F.conv2d(
            *map(torch.from_numpy, (x, w, b)), stride=stride, padding=dilation, dilation=dilation
        )
    ).numpy()
    np.testing.assert_allclose(exe(x=x)["y"], expect, rtol=1e-4, atol=1e-4)


def test_a_winograd_conv_keeps_no_onednn_weights_and_runs_at_team_sizes_not_planned():
    """The plan keeps the transformed weights and not oneDNN's reordered copy beside them:
    the primitive is never made, its descriptor at one thread gives the layouts. So a
    team size the plan did not ask oneDNN about (3 threads) computes it the same."""
    x, w, b = _rand(2, 64, 10, 12), _rand(64, 64, 3, 3, scale=0.05), _rand(64)
    g = _conv_graph(x.shape, w, b, "residual")
    for threads in (1, 3):
        exe = mdsl.compile(g, "c", threads=threads)
        (k,) = [k for k in exe.plan.all_kernels() if isinstance(k, kir.Conv)]
        assert k.winograd and not k.onednn_weights and not k.packed_w
        floats = sum(c.size for c in exe.plan.constants)
        assert floats == w.size + b.size + 16 * 64 * 64  # the graph's, and the transformed
        for _ in range(2):
            np.testing.assert_allclose(
                exe(x=x)["y"], _torch(x, w, b, "residual"), rtol=1e-5, atol=1e-5
            )


def test_mdsl_winograd_0_keeps_onednn_for_every_convolution(monkeypatch):
    x, w, b = _rand(1, 32, 6, 6), _rand(32, 32, 3, 3, scale=0.1), _rand(32)
    monkeypatch.setenv("MDSL_WINOGRAD", "0")
    assert not winograd.enabled()
    exe = mdsl.compile(_conv_graph(x.shape, w, b, "relu"), "c", threads=1)
    assert "mdsl_dnnl_conv_run(" in _source(exe) and WINOGRAD not in _source(exe)
    np.testing.assert_allclose(exe(x=x)["y"], _torch(x, w, b, "relu"), rtol=1e-5, atol=1e-5)


def test_transformed_weights_give_the_direct_convolution_of_one_tile():
    """u = G g G^T, with the input transform B^T d B and the output one A^T m A written
    out here: the kernel's three steps in numpy, for one tile and one channel pair."""
    g, d = RNG.standard_normal((3, 3)), RNG.standard_normal((4, 4))
    w = np.zeros((32, 1, 3, 3), np.float32)
    w[21, 0] = g  # output channel 21: the second panel's lane 5
    u = winograd.transformed_weights(w)[:, 1, 0, 5].reshape(4, 4)
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])
    got = at @ (u * (bt @ d @ bt.T)) @ at.T
    direct = [[np.sum(d[i : i + 3, j : j + 3] * g) for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(got, direct, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "cin, cout, size, winograd_expected",
    [(64, 256, 13, True), (256, 80, 3, False), (16, 32, 5, False), (16, 32, 28, True)],
    ids=["fire9-13x13", "3x3", "few-pairs-5x5", "few-pairs-28x28"],
)
def test_the_cost_rule_keeps_onednn_where_edge_tiles_cost_more_than_the_products_save(
    monkeypatch, cin, cout, size, winograd_expected
):
    """13x13 outputs take 14x14's tiles: Winograd still won there (0.61x oneDNN's time,
    SqueezeNet's fire9); 3x3 outputs take 4x4's, and with few channel pairs the
    transforms weigh more (16 -> 32: 0.84x on 28x28, but 6x6's work for 5x5)."""
    monkeypatch.setattr(winograd, "MAX_EXPECTED_RATIO", 1.0)
    x, w = _rand(1, cin, size, size), _rand(cout, cin, 3, 3, scale=(9 * cin) ** -0.5)
    g = _conv_graph(x.shape, w, None, "relu")
    exe = mdsl.compile(g, "c", threads=1)
    assert (WINOGRAD in _source(exe)) == winograd_expected
    np.testing.assert_allclose(exe(x=x)["y"], _torch(x, w, None, "relu"), rtol=1e-5, atol=1e-5)
