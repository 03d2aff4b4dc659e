"""Concat inputs written straight into the Concat's output (`mdsl.codegen.concat_in_place`):
which copies go, and results against PyTorch and the interpreter at 1 and 2 threads, for
inputs read elsewhere, reused in place, fed twice, graph inputs and outputs, chains of
Concats, batch 2 and a symbolic batch (both keep their copies)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.codegen import kir, onednn
from mdsl.codegen.concat_in_place import View, drop_concat_copies

RNG = np.random.default_rng(2020)
T = torch.from_numpy


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _copies(exe) -> int:
    return sum(1 for k in exe.plan.kernels if k.nodes[0].op_type == "Concat")


def _check(exe, g, feeds, expect: dict):
    for _ in range(2):
        got = exe(feeds)
        for name, want in expect.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)
    interpreted = mdsl.interpret(g, feeds)
    for name in expect:
        np.testing.assert_allclose(exe(feeds)[name], interpreted[name], rtol=1e-5, atol=1e-5)


def _two_branches(shape):
    """relu(x) and 2x + 1 -> Concat along channels -> * 3."""
    with mdsl.Graph("two_branches") as g:
        x = g.input("x", shape)
        g.output(ops.concat([ops.relu(x), x * 2.0 + 1.0], axis=1) * 3.0, "y")
    return g


def _torch_two_branches(x):
    x = T(x)
    return (torch.cat([torch.relu(x), x * 2 + 1], 1) * 3).numpy()


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_1_inputs_are_written_into_the_concat(threads):
    g = _two_branches((1, 4, 6, 6))
    exe = mdsl.compile(g, "c", threads=threads)
    assert _copies(exe) == 0 and len(exe.plan.views) == 2
    offsets = sorted(v.offset for v in exe.plan.views.values())
    assert offsets == [0, 4 * 36 * 4] and len({v.root for v in exe.plan.views.values()}) == 1
    src = "\n".join(exe.sources.values())
    assert src.count("write straight into") == 2
    x = _rand(1, 4, 6, 6)
    _check(exe, g, {"x": x}, {"y": _torch_two_branches(x)})
    summary = exe.profile({"x": x}, runs=1).summary()
    assert "2 inputs of 1 Concats written straight into their outputs" in summary


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_2_keeps_its_copies(threads):
    g = _two_branches((2, 4, 6, 6))
    exe = mdsl.compile(g, "c", threads=threads)
    assert _copies(exe) == 2 and not exe.plan.views
    x = _rand(2, 4, 6, 6)
    _check(exe, g, {"x": x}, {"y": _torch_two_branches(x)})


def test_a_symbolic_batch_keeps_its_copies():
    with mdsl.Graph("symbolic") as g:
        x = g.input("x", ("N", 4, 6, 6))
        g.output(ops.concat([ops.relu(x), x * 2.0 + 1.0], axis=1) * 3.0, "y")
    exe = mdsl.compile(g, "c")
    for n in (1, 2):
        x = _rand(n, 4, 6, 6)
        np.testing.assert_allclose(exe(x=x)["y"], _torch_two_branches(x), rtol=1e-5, atol=1e-5)
        assert not exe.plan.views


def test_an_unaligned_run_is_copied():
    """3 channels of 5x5: the second input would start 300 bytes in, off the 64-byte
    alignment every arena buffer has: only the first input is placed."""
    g = _two_branches((1, 3, 5, 5))
    exe = mdsl.compile(g, "c")
    assert _copies(exe) == 1 and [v.offset for v in exe.plan.views.values()] == [0]
    x = _rand(1, 3, 5, 5)
    _check(exe, g, {"x": x}, {"y": _torch_two_branches(x)})


@pytest.mark.parametrize("threads", [1, 2])
def test_an_input_read_after_the_concat_is_not_overwritten_in_place(threads):
    """relu(x) is read after the Concat by a product that is its last reader and could
    take over its bytes in place; those bytes are the Concat's, read later: refused."""
    with mdsl.Graph("reread") as g:
        x = g.input("x", (1, 4, 4, 4))
        a = ops.relu(x)
        c = ops.concat([a, x * 2.0], axis=1)
        e = a * ops.reduce_sum(c, axes=[1, 2, 3], keepdims=True)
        g.output(c + ops.reduce_max(e, axes=[1, 2, 3], keepdims=True), "y")
        g.output(ops.transpose(e, perm=(0, 1, 3, 2)), "z")
    exe = mdsl.compile(g, "c", threads=threads)
    assert len(exe.plan.views) == 2
    assert not set(exe.plan.inplace.values()) & set(exe.plan.views)
    assert not exe.plan.memory.aliases
    xt = T(x := _rand(1, 4, 4, 4))
    c = torch.cat([torch.relu(xt), xt * 2], 1)
    e = torch.relu(xt) * c.sum((1, 2, 3), keepdim=True)
    expect = {"y": (c + e.amax((1, 2, 3), keepdim=True)).numpy(), "z": e.transpose(2, 3).numpy()}
    _check(exe, g, {"x": x}, expect)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_concat_holding_views_is_not_reused_in_place(threads):
    """`c + a`, with a one of c's inputs: the sum may not take over c's bytes in place,
    since its writes to channel 0 would change `a` before channel 1 reads it."""
    with mdsl.Graph("root_reuse") as g:
        x = g.input("x", (1, 1, 8, 8))
        a = ops.relu(x)
        c = ops.concat([a, x * 2.0], axis=1)
        g.output(ops.transpose(c + a, perm=(0, 1, 3, 2)), "z")
    exe = mdsl.compile(g, "c", threads=threads)
    assert len(exe.plan.views) == 2 and not exe.plan.memory.aliases
    xt = T(x := _rand(1, 1, 8, 8))
    a = torch.relu(xt)
    _check(exe, g, {"x": x}, {"z": (torch.cat([a, xt * 2], 1) + a).transpose(2, 3).numpy()})


@pytest.mark.parametrize("threads", [1, 2])
def test_the_same_input_twice_is_placed_once(threads):
    with mdsl.Graph("twice") as g:
        x = g.input("x", (1, 4, 4, 4))
        a = ops.relu(x)
        g.output(ops.concat([a, a, x * 2.0], axis=1) - 1.0, "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert _copies(exe) == 1 and len(exe.plan.views) == 2
    xt = T(x := _rand(1, 4, 4, 4))
    a = torch.relu(xt)
    _check(exe, g, {"x": x}, {"y": (torch.cat([a, a, xt * 2], 1) - 1).numpy()})


@pytest.mark.parametrize("threads", [1, 2])
def test_a_concat_that_is_a_graph_output_with_a_graph_input_among_its_inputs(threads):
    """The output buffer holds the views; the graph input is copied."""
    with mdsl.Graph("io") as g:
        x = g.input("x", (1, 4, 4, 4))
        g.output(ops.concat([x, ops.relu(x), ops.sigmoid(x)], axis=1), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert _copies(exe) == 1 and {v.root for v in exe.plan.views.values()} == {"out0"}
    xt = T(x := _rand(1, 4, 4, 4))
    _check(exe, g, {"x": x}, {"y": torch.cat([xt, torch.relu(xt), torch.sigmoid(xt)], 1).numpy()})


@pytest.mark.parametrize("threads", [1, 2])
def test_a_dense_chain_of_concats_lies_in_the_last_one(threads):
    """DenseNet's pattern: each Concat of the previous one and a new feature. Every
    Concat is a view of the last one's buffer; no copy is left."""
    with mdsl.Graph("dense_chain") as g:
        h = g.input("x", (1, 4, 4, 4))
        h = ops.relu(h)
        for _ in range(3):
            h = ops.concat([h, ops.sigmoid(h[:, :4]) * 2.0], axis=1)
        g.output(h * 1.5, "y")
    exe = mdsl.compile(g, "c", threads=threads)
    assert _copies(exe) == 0
    (root,) = {v.root for v in exe.plan.views.values()}
    assert exe.plan.buffers[root].elements == 16 * 16
    h = torch.relu(T(x := _rand(1, 4, 4, 4)))
    for _ in range(3):
        h = torch.cat([h, torch.sigmoid(h[:, :4]) * 2], 1)
    _check(exe, g, {"x": x}, {"y": (h * 1.5).numpy()})


def test_the_debug_build_materializes_every_input_and_equals_torch():
    g = _two_branches((1, 4, 6, 6))
    exe = mdsl.compile(g, "c", debug=True)
    x = _rand(1, 4, 6, 6)
    np.testing.assert_allclose(exe(x=x)["y"], _torch_two_branches(x), rtol=1e-5, atol=1e-5)


def test_numba_keeps_its_copies_and_equals_torch():
    g = _two_branches((1, 4, 6, 6))
    exe = mdsl.compile(g, "numba")
    assert _copies(exe) == 2 and not exe.plan.views
    x = _rand(1, 4, 6, 6)
    np.testing.assert_allclose(exe(x=x)["y"], _torch_two_branches(x), rtol=1e-5, atol=1e-5)


def test_an_input_a_kernel_reads_and_writes_is_not_placed():
    """A oneDNN convolution computing in its residual's buffer reads and writes it: the
    Concat bytes would be overwritten. Plans made by hand: its buffer stays its own."""
    from mdsl.codegen.plan import BufferSpec, Plan
    from mdsl.ir.dtype import DType

    def copy(src, dst, offset):
        access = kir.Access
        return kir.Pointwise(
            "copy", [kir.NodeRef("cat", "Concat", None)], (1, 16),
            {"src": access(src, DType.float32, 0, (16, 1))}, [],
            [kir.Store(access(dst, DType.float32, offset, (32, 1)), mdsl.expr.var("src"))],
        )  # fmt: skip

    def plan(rewrites_a: bool) -> Plan:
        p = Plan(mdsl.Graph("hand"))
        for name, n in (("a", 16), ("b", 16), ("c", 32)):
            p.buffers[name] = BufferSpec(name, name, DType.float32, n, "arena")
        writer_a = kir.Callback("wa", [], 0, ["a"] if rewrites_a else [], ["a"])
        writer_b = kir.Callback("wb", [], 1, [], ["b"])
        p.kernels = [writer_a, writer_b, copy("a", "c", 0), copy("b", "c", 16)]
        return p

    def views(p):
        from mdsl.codegen.plan import kernel_buffers

        drop_concat_copies(p, kernel_buffers)
        return p.views

    assert views(plan(False)) == {"a": View("c", 0, "cat"), "b": View("c", 64, "cat")}
    assert views(plan(True)) == {"b": View("c", 64, "cat")}


# -- oneDNN convolutions around Concats ---------------------------------------------------------
needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)


def _fire(batch: int, expand: int, squeeze: int = 16):
    """SqueezeNet's fire modules, twice: a 1x1 squeeze conv, then a 1x1 and a 3x3 expand
    conv (`expand` channels each, ReLU) into a channel Concat; weights and input."""
    shapes = [(squeeze, 8, 1), (expand, squeeze, 1), (expand, squeeze, 3)]
    shapes += [(squeeze, 2 * expand, 1), (expand, squeeze, 1), (expand, squeeze, 3)]
    ws = [(_rand(o, i, k, k) * np.float32(1 / np.sqrt(i * k * k)), _rand(o)) for o, i, k in shapes]
    with mdsl.Graph(f"fire_b{batch}_e{expand}") as g:
        h = g.input("x", (batch, 8, 9, 9))
        for f in range(2):
            conv = [
                lambda t, j=j: ops.relu(
                    ops.conv2d(t, g.const(f"w{j}", ws[j][0]), g.const(f"b{j}", ws[j][1]),
                               pads=shapes[j][2] // 2)
                )
                for j in range(3 * f, 3 * f + 3)
            ]  # fmt: skip
            s = conv[0](h)
            h = ops.concat([conv[1](s), conv[2](s)], axis=1)
        g.output(h, "y")
    return g, ws, _rand(batch, 8, 9, 9)


def _torch_fire(ws, x):
    h = T(x)
    for f in range(2):
        c = [
            lambda t, j=j: torch.relu(
                F.conv2d(t, T(ws[j][0]), T(ws[j][1]), padding=ws[j][0].shape[-1] // 2)
            )
            for j in range(3 * f, 3 * f + 3)
        ]
        s = c[0](h)
        h = torch.cat([c[1](s), c[2](s)], 1)
    return h.numpy()


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", [(1, 32), (2, 32), (1, 24)], ids=["b1", "b2", "partial-block"])
def test_fire_modules_equal_torch(case, threads):
    """Channels last (oneDNN's choice): each Concat input is spread over the output's
    pixels and copied, whatever the batch; 24 channels would pad nChw16c's blocks."""
    g, ws, x = _fire(*case)
    exe = mdsl.compile(g, "c", threads=threads)
    assert _copies(exe) == 4 and not exe.plan.views
    for _ in range(3):  # both team sizes
        np.testing.assert_allclose(exe(x=x)["y"], _torch_fire(ws, x), rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch", [1, 2])
def test_a_dense_block_in_kept_layouts_equals_the_interpreter(batch, threads):
    """DenseNet: a 7x7 stride-2 stem and max pool, then BN + ReLU -> 1x1 conv + ReLU ->
    3x3 conv, a Concat of the previous one and the new feature (16 channels), three
    times, and a transition."""
    from tests.runtime.test_onednn_kept_pointwise import _bn, _conv

    with mdsl.Graph(f"dense_b{batch}") as g:
        h = g.input("x", (batch, 3, 17, 17))
        w = g.const("w", _rand(32, 3, 7, 7) * np.float32(0.1))
        h = ops.max_pool(ops.relu(ops.conv2d(h, w, pads=3, strides=2)), 3, 1, pads=1)
        for i in range(3):
            y = _conv(g, _conv(g, _bn(g, h, f"bn{i}"), 32, 1, f"a{i}"), 16, 3, f"b{i}", False)
            h = ops.concat([h, y], axis=1)
        g.output(_conv(g, _bn(g, h, "last"), 16, 1, "transition"), "y")
    exe = mdsl.compile(g, "c", threads=threads)
    # batch 1: the stem's nChw16c and the features' NHWC meet in NCHW Concats, each of
    # which lies at the start of the next (copied: the new features, from their layout)
    assert (len(exe.plan.views), _copies(exe)) == ((2, 4) if batch == 1 else (0, 6))
    x = _rand(batch, 3, 17, 17)
    for _ in range(3):
        np.testing.assert_allclose(
            exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
        )


def _expand(batch: int, cin: int, size: int, *, wino_first: bool = False, also_read: bool = False):
    """A fire module's expand half: 1x1 and 3x3 convolutions (64 channels each, ReLU) of
    the input into a channel Concat, then a 1x1 convolution; weights and input."""
    ws = [_rand(64, cin, k, k) * np.float32(1 / np.sqrt(cin * k * k)) for k in (1, 3)]
    ws.append(_rand(16, 128, 1, 1) * np.float32(1 / np.sqrt(128)))
    with mdsl.Graph(f"expand_b{batch}_c{cin}") as g:
        x = g.input("x", (batch, cin, size, size))
        w = [g.const(f"w{i}", v) for i, v in enumerate(ws)]
        one, three = ops.relu(ops.conv2d(x, w[0])), ops.relu(ops.conv2d(x, w[1], pads=1))
        h = ops.concat([three, one] if wino_first else [one, three], axis=1)
        g.output(ops.relu(ops.conv2d(h, w[2])), "y")
        if also_read:  # another kernel reads the 3x3 branch whole
            g.output(ops.conv2d(three, g.const("w3", _rand(16, 64, 1, 1))), "z")
    return g, ws, _rand(batch, cin, size, size)


def _torch_expand(ws, x, wino_first: bool = False):
    one = torch.relu(F.conv2d(T(x), T(ws[0])))
    three = torch.relu(F.conv2d(T(x), T(ws[1]), padding=1))
    h = torch.cat([three, one] if wino_first else [one, three], 1)
    return torch.relu(F.conv2d(h, T(ws[2]))).numpy()


def _winograd(exe) -> kir.Conv:
    (conv,) = [k for k in exe.plan.kernels if isinstance(k, kir.Conv) and k.winograd]
    return conv


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "batch, cin, wino_first", [(1, 16, False), (2, 16, False), (1, 32, True), (2, 64, True)]
)
def test_a_winograd_branch_writes_into_its_channels_last_concat(batch, cin, wino_first, threads):
    """SqueezeNet's expand convolutions: the 3x3 one (Winograd, NHWC) stores each pixel's
    channels at the Concat's pitch, and its copy goes; the 1x1 one (oneDNN) is copied."""
    g, ws, x = _expand(batch, cin, 14, wino_first=wino_first)
    exe = mdsl.compile(g, "c", threads=threads)
    want = _torch_expand(ws, x, wino_first)
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-4, atol=1e-4)  # plans it
    conv = _winograd(exe)
    assert conv.out_pixel_stride == 128 and _copies(exe) == 1
    (view,) = exe.plan.views.values()
    assert (view.pixel_stride, view.offset) == (128, 0 if wino_first else 64 * 4)
    source = "\n".join(exe.sources.values())
    assert "its pixels 128 elements apart" in source and "its pixels 128 floats apart" in source
    for _ in range(3):  # both team sizes
        np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_winograd_branch_of_many_input_channels_or_read_elsewhere_is_copied():
    """With more than SPREAD_MAX_CIN input channels the Winograd kernel costs more than
    the copy, and writing at the Concat's pitch slowed it by more than the copy took
    (Inception); an input another kernel reads too stays whole (placed, that kernel read
    the Concat's pixels as its own: an error of 2e2)."""
    for cin, also_read in ((96, False), (16, True)):
        g, ws, x = _expand(1, cin, 14, also_read=also_read)
        exe = mdsl.compile(g, "c", threads=1)
        got, want = exe(x=x), mdsl.interpret(g, {"x": x})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got["y"], _torch_expand(ws, x), rtol=1e-4, atol=1e-4)
        assert _winograd(exe).out_pixel_stride == 0
        assert _copies(exe) == 2 and not exe.plan.views
