"""Shape inference of the neural-network ops with symbolic N/H/W.

The symbolic output sizes are checked twice: structurally (the exact `Dim` expression)
and by value (evaluated for many concrete sizes and compared with what PyTorch's
convolution and pooling produce, and with what the interpreter returns).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from mdsl.ops.windows import make_window, output_shape

N, C, H, W = mdsl.Dim("N"), mdsl.Dim("C"), mdsl.Dim("H"), mdsl.Dim("W")


def _built(build, *inputs):
    """Build a graph whose inputs are `(name, shape, dtype)`; return the graph and output."""
    with mdsl.Graph() as g:
        tensors = [g.input(name, shape, dtype) for name, shape, dtype in inputs]
        y = build(*tensors)
        g.output(y, "y")
    return g, y


def _image(channels=3, dtype="float32"):
    return ("x", ("N", channels, "H", "W"), dtype)


def test_conv2d_same_size_keeps_symbols():
    _, y = _built(lambda x: ops.conv2d(x, mdsl.param("w", (16, 3, 3, 3)), pads=1), _image())
    assert y.shape == (N, 16, H, W)
    assert y.format == mdsl.ND


def test_conv2d_stride2_gives_floor_division():
    _, y = _built(
        lambda x: ops.conv2d(x, mdsl.param("w", (8, 3, 3, 3)), strides=2, pads=1), _image()
    )
    assert y.shape == (N, 8, (H + 1) // 2, (W + 1) // 2)


def test_conv_auto_pad_formulas():
    def shape(auto_pad, strides=2):
        build = lambda x: ops.conv2d(  # noqa: E731
            x, mdsl.param("w", (4, 3, 3, 3)), strides=strides, auto_pad=auto_pad
        )
        return _built(build, _image())[1].shape[2:]

    assert shape("SAME_UPPER") == ((H + 1) // 2, (W + 1) // 2)
    assert shape("SAME_LOWER") == ((H + 1) // 2, (W + 1) // 2)
    assert shape("SAME_UPPER", strides=1) == (H, W)
    assert shape("VALID") == ((H - 1) // 2, (W - 1) // 2)


def test_conv_dilation_and_groups():
    _, y = _built(
        lambda x: ops.conv2d(x, mdsl.param("w", (6, 2, 3, 3)), dilations=2, group=2), _image(4)
    )
    assert y.shape == (N, 6, H - 4, W - 4)


def test_conv_nchw_format_propagates():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 3, 8, 8), format="NCHW")
        y = ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)))
        g.output(y, "y")
    assert y.format == mdsl.NCHW and y.shape == (N, 4, 6, 6)


def test_conv_1d_symbolic_length():
    _, y = _built(
        lambda x: ops.conv(x, mdsl.param("w", (5, 3, 4)), strides=3, pads=(1, 2)),
        ("x", ("N", 3, "L"), "float32"),
    )
    length = mdsl.Dim("L")
    assert y.shape == (N, 5, (length + 2) // 3)


def test_pools_symbolic():
    _, y = _built(lambda x: ops.max_pool(x, 3, strides=2, pads=1), _image(64))
    assert y.shape == (N, 64, (H + 1) // 2, (W + 1) // 2)
    _, y = _built(lambda x: ops.max_pool(x, 3, strides=2, ceil_mode=True), _image(64))
    assert y.shape == (N, 64, H // 2, W // 2)
    _, y = _built(lambda x: ops.average_pool(x, 2, strides=2), _image(8))
    assert y.shape == (N, 8, H // 2, W // 2)
    _, y = _built(ops.global_average_pool, _image(8))
    assert y.shape == (N, 8, 1, 1)
    _, y = _built(ops.global_max_pool, ("x", ("N", 8, "L"), "float32"))
    assert y.shape == (N, 8, 1)


def test_normalizations_and_softmax_keep_shape():
    def params(*names, shape=(3,), dtype="float32"):
        return [mdsl.param(n, shape, dtype) for n in names]

    _, y = _built(lambda x: ops.batch_norm(x, *params("s", "b", "m", "v")), _image())
    assert y.shape == (N, 3, H, W)
    _, y = _built(lambda x: ops.instance_norm(x, *params("s", "b")), _image())
    assert y.shape == (N, 3, H, W)
    _, y = _built(lambda x: ops.group_norm(x, *params("s", "b"), num_groups=3), _image())
    assert y.shape == (N, 3, H, W)
    seq = ("x", ("B", "T", 8), "float16")
    _, y = _built(lambda x: ops.layer_norm(x, *params("s", "b", shape=(8,), dtype="float16")), seq)
    assert y.shape == (mdsl.Dim("B"), mdsl.Dim("T"), 8)
    _, y = _built(lambda x: ops.softmax(x, axis=1), seq)
    assert y.shape == (mdsl.Dim("B"), mdsl.Dim("T"), 8) and y.dtype == mdsl.float16


def test_gemm_linear_quantize_symbolic():
    _, y = _built(
        lambda a: ops.gemm(a, mdsl.param("b", (16, 4)), transA=True),
        ("a", (16, "M"), "float32"),
    )
    assert y.shape == (mdsl.Dim("M"), 4)
    _, y = _built(
        lambda x: ops.linear(x, mdsl.param("w", (8, 2)), mdsl.param("b", (2,))),
        ("x", ("B", "T", 8), "float32"),
    )
    assert y.shape == (mdsl.Dim("B"), mdsl.Dim("T"), 2)
    _, y = _built(
        lambda x: ops.quantize_linear(
            x, mdsl.param("s", (3,), init="ones"), axis=1, output_dtype="int8"
        ),
        _image(),
    )
    assert y.shape == (N, 3, H, W) and y.dtype == mdsl.int8


def test_symbolic_channel_count_is_refused_with_context():
    with pytest.raises(mdsl.ShapeError) as err:
        _built(
            lambda x: ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3))), ("x", (1, "C", 8, 8), "float32")
        )
    message = str(err.value)
    assert "(Conv)" in message and "test_nn_shapes.py" in message and "channel count" in message


# -- the formulas, by value --------------------------------------------------------------------
WINDOWS_1D = [  # (kernel, stride, pad, dilation, ceil_mode), pads PyTorch accepts
    (k, s, p, d, ceil)
    for k, s, p, d, ceil in itertools.product((1, 2, 3), (1, 2, 3), (0, 1), (1, 2), (False, True))
    if p < k and 2 * p <= (k - 1) * d + 1
]


@pytest.mark.parametrize(("kernel", "stride", "pad", "dilation", "ceil_mode"), WINDOWS_1D)
def test_pool_output_size_matches_torch_for_every_length(kernel, stride, pad, dilation, ceil_mode):
    window = make_window((kernel,), (stride,), (dilation,), (pad, pad), "NOTSET", ceil_mode)
    (symbolic,) = output_shape(window, (mdsl.Dim("L"),))
    for length in range((kernel - 1) * dilation + 1, 20):
        want = F.max_pool1d(
            torch.zeros(1, 1, length), kernel, stride, pad, dilation, ceil_mode=ceil_mode
        ).shape[-1]
        (got,) = output_shape(window, (length,))
        evaluated = symbolic if isinstance(symbolic, int) else symbolic.evaluate({"L": length})
        assert got == want == evaluated, f"L={length}"


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize(("kernel", "stride"), [(1, 1), (3, 1), (3, 2), (2, 3), (5, 2)])
def test_auto_pad_sizes_follow_onnx(auto_pad, kernel, stride):
    window = make_window((kernel,), (stride,), None, None, auto_pad)
    (symbolic,) = output_shape(window, (mdsl.Dim("L"),))
    for length in range(kernel, 20):
        want = -(-length // stride) if auto_pad != "VALID" else -(-(length - kernel + 1) // stride)
        (got,) = output_shape(window, (length,))
        evaluated = symbolic if isinstance(symbolic, int) else symbolic.evaluate({"L": length})
        assert got == want == evaluated, f"L={length}"


@pytest.mark.parametrize("size", [5, 6, 9])
def test_interpreter_agrees_with_symbolic_shapes(size):
    """The interpreter checks every result against the declared (symbolic) shape."""

    def block(x):
        y = ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), strides=2, auto_pad="SAME_LOWER")
        y = ops.max_pool(y, 2, strides=2, pads=1, ceil_mode=True)
        return ops.average_pool(y, 2, strides=1, pads=(0, 1, 1, 0), count_include_pad=True)

    g, y = _built(block, _image())
    feed = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    out = mdsl.interpret(g, {"x": feed})["y"]
    env = {"N": 2, "H": size, "W": size}
    expected = tuple(d if isinstance(d, int) else d.evaluate(env) for d in y.shape)
    assert out.shape == expected
