"""Cases for the neural-network ops (Conv, pooling, normalization, softmax, Gemm, Dropout,
quantization), checked against torch.nn.functional or an independent formula.

Float32 sums over windows or channels allow 1e-4; float16 cases compare with PyTorch in
float32 rounded once to float16 (mdsl's reference semantics) and allow ~one half ulp.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from tests.ops.cases_activation import in_float32
from tests.ops.op_table import OpCase, rand

TOL = {"rtol": 1e-4, "atol": 1e-4}
HALF_TOL = {"rtol": 3e-3, "atol": 3e-3}

IMG = rand(2, 3, 8, 8)
W3 = rand(4, 3, 3, 3, lo=-0.5, hi=0.5, seed=1)
B4 = rand(4, seed=2)


def conv_case(id, build, torch_fn, inputs, **kw):
    return OpCase("Conv", build, inputs, torch_fn, id=id, **{**TOL, **kw})


def padded(x, onnx_pads, value=0.0):
    """x padded as ONNX 2-D pads (top, left, bottom, right) say, for torch's pool/conv."""
    top, left, bottom, right = onnx_pads
    return F.pad(x, (left, right, top, bottom), value=value)


CONV_CASES = [
    conv_case(
        "bias-pad1",
        lambda x, w, b: ops.conv2d(x, w, b, pads=1),
        lambda x, w, b: F.conv2d(x, w, b, padding=1),
        {"x": IMG, "w": W3, "b": B4},
    ),
    conv_case(
        "stride2-pads-per-axis",
        lambda x, w: ops.conv2d(x, w, strides=2, pads=(1, 2)),
        lambda x, w: F.conv2d(x, w, stride=2, padding=(1, 2)),
        {"x": IMG, "w": W3},
    ),
    conv_case(
        "asymmetric-pads",
        lambda x, w: ops.conv2d(x, w, pads=(0, 1, 2, 0)),
        lambda x, w: F.conv2d(padded(x, (0, 1, 2, 0)), w),
        {"x": IMG, "w": W3},
    ),
    conv_case(
        "dilation-group",
        lambda x, w: ops.conv2d(x, w, dilations=2, group=2, strides=(1, 2)),
        lambda x, w: F.conv2d(x, w, dilation=2, groups=2, stride=(1, 2)),
        {"x": rand(1, 4, 9, 9), "w": rand(6, 2, 3, 3, seed=3)},
    ),
    conv_case(
        "depthwise",
        lambda x, w, b: ops.conv2d(x, w, b, pads=1, group=4),
        lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=4),
        {"x": rand(1, 4, 7, 7), "w": rand(4, 1, 3, 3, seed=4), "b": B4},
    ),
    conv_case(
        "same-upper",
        lambda x, w: ops.conv2d(x, w, strides=2, auto_pad="SAME_UPPER"),
        lambda x, w: F.conv2d(padded(x, (0, 0, 1, 1)), w, stride=2),
        {"x": IMG, "w": W3},
    ),
    conv_case(
        "same-lower",
        lambda x, w: ops.conv2d(x, w, strides=2, auto_pad="SAME_LOWER"),
        lambda x, w: F.conv2d(padded(x, (1, 1, 0, 0)), w, stride=2),
        {"x": IMG, "w": W3},
    ),
    conv_case(
        "valid",
        lambda x, w: ops.conv2d(x, w, strides=3, auto_pad="VALID"),
        lambda x, w: F.conv2d(x, w, stride=3),
        {"x": IMG, "w": W3},
    ),
    conv_case(
        "1d",
        lambda x, w, b: ops.conv(x, w, b, strides=2, pads=1),
        lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
        {"x": rand(2, 3, 11), "w": rand(5, 3, 3, seed=5), "b": rand(5, seed=6)},
    ),
    conv_case(
        "3d",
        lambda x, w: ops.conv(x, w, pads=(1, 0, 1), dilations=(1, 2, 1)),
        lambda x, w: F.conv3d(x, w, padding=(1, 0, 1), dilation=(1, 2, 1)),
        {"x": rand(1, 2, 4, 6, 5), "w": rand(3, 2, 2, 2, 3, seed=7)},
    ),
    conv_case(
        "symbolic-batch",
        lambda x, w, b: ops.conv2d(x, w, b, strides=2, pads=1),
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        {"x": IMG, "w": W3, "b": B4},
        symbolic={"x": ("N", 3, "H", "W")},
    ),
    conv_case(
        "f16",
        lambda x, w, b: ops.conv2d(x, w, b, pads=1),
        in_float32(lambda x, w, b: F.conv2d(x, w, b, padding=1)),
        {"x": IMG.astype(np.float16), "w": W3.astype(np.float16), "b": B4.astype(np.float16)},
        **HALF_TOL,
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv2d(x, w),
        {"x": IMG, "w": rand(4, 2, 3, 3)},
        raises=mdsl.ShapeError,
        id="bad-channels",
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv2d(x, w, group=4),
        {"x": rand(1, 6, 8, 8), "w": rand(4, 2, 3, 3)},
        raises=mdsl.ShapeError,
        id="group-not-dividing",
    ),
    OpCase(
        "Conv",
        lambda x, w, b: ops.conv2d(x, w, b),
        {"x": IMG, "w": W3, "b": rand(3)},
        raises=mdsl.ShapeError,
        id="bad-bias",
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv2d(x, w),
        {"x": rand(1, 3, 2, 2), "w": W3},
        raises=mdsl.ShapeError,
        id="input-smaller-than-kernel",
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv2d(x, w, pads=(1, 1, 1)),
        {"x": IMG, "w": W3},
        raises=mdsl.ShapeError,
        id="pads-count",
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv2d(x, w, pads=1, auto_pad="SAME_UPPER"),
        {"x": IMG, "w": W3},
        raises=mdsl.GraphError,
        id="pads-and-auto-pad",
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv2d(x, w, strides=0),
        {"x": IMG, "w": W3},
        raises=mdsl.ShapeError,
        id="zero-stride",
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv(x, w),
        {"x": IMG, "w": rand(4, 3, 3)},
        raises=mdsl.ShapeError,
        id="rank-mismatch",
    ),
    OpCase(
        "Conv",
        lambda x, w: ops.conv2d(x, w),
        {"x": IMG.astype(np.int32), "w": W3.astype(np.int32)},
        raises=mdsl.DTypeError,
        id="int",
    ),
]

POOL_IMG = rand(2, 3, 7, 7)
POOL_CASES = [
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 2, strides=2),
        {"x": IMG},
        lambda x: F.max_pool2d(x, 2, 2),
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 3, strides=2, pads=1),
        {"x": POOL_IMG},
        lambda x: F.max_pool2d(x, 3, 2, 1),
        id="pad1",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 2, strides=2, ceil_mode=True),
        {"x": POOL_IMG},
        lambda x: F.max_pool2d(x, 2, 2, ceil_mode=True),
        id="ceil",
    ),
    OpCase(
        "MaxPool",
        # ceil_mode's last window would start in the end padding: dropped (5 -> 3, not 4)
        lambda x: ops.max_pool(x, 2, strides=2, pads=1, ceil_mode=True),
        {"x": rand(1, 2, 5, 5)},
        lambda x: F.max_pool2d(x, 2, 2, 1, ceil_mode=True),
        id="ceil-window-in-padding",
    ),
    OpCase(
        "AveragePool",
        # ceil_mode: a window larger than the input is one partial window (HF EfficientNet)
        lambda x: ops.average_pool(x, 9, strides=9, ceil_mode=True),
        {"x": rand(1, 2, 7, 5)},
        lambda x: F.avg_pool2d(x, 9, 9, ceil_mode=True),
        id="ceil-window-larger-than-input",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 9, strides=9),
        {"x": rand(1, 2, 7, 5)},
        raises=mdsl.ShapeError,
        id="window-larger-than-input",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, (2, 3), strides=1, dilations=2),
        {"x": POOL_IMG},
        lambda x: F.max_pool2d(x, (2, 3), 1, dilation=2),
        id="dilation",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 3, strides=2, auto_pad="SAME_UPPER"),
        {"x": IMG},
        lambda x: F.max_pool2d(padded(x, (0, 0, 1, 1), -np.inf), 3, 2),
        id="same-upper",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 3, strides=2, pads=1),
        {"x": rand(2, 3, 9)},
        lambda x: F.max_pool1d(x, 3, 2, 1),
        id="1d",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 2, strides=2, pads=1),
        {"x": rand(1, 2, 5, 5, dtype="int8", lo=-128, hi=127)},
        lambda x: F.max_pool2d(x.float(), 2, 2, 1).to(torch.int8),
        id="int8",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 3, strides=2, pads=1),
        {"x": POOL_IMG.astype(np.float16)},
        lambda x: F.max_pool2d(x, 3, 2, 1),
        id="f16",
        atol=0,
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 2, strides=2, pads=2),
        {"x": POOL_IMG},
        raises=mdsl.ShapeError,
        id="pad-not-below-kernel",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, (2, 2, 2)),
        {"x": POOL_IMG},
        raises=mdsl.ShapeError,
        id="kernel-rank",
    ),
    OpCase(
        "MaxPool",
        lambda x: ops.max_pool(x, 2),
        {"x": rand(1, 2, 4, 4, dtype="int32")},
        raises=mdsl.DTypeError,
        id="int32",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 2, strides=2),
        {"x": IMG},
        lambda x: F.avg_pool2d(x, 2, 2),
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 3, strides=2, pads=1),
        {"x": POOL_IMG},
        lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
        id="exclude-pad",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 3, strides=2, pads=1, count_include_pad=True),
        {"x": POOL_IMG},
        lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=True),
        id="include-pad",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 3, strides=2, pads=1, ceil_mode=True, count_include_pad=True),
        {"x": rand(1, 2, 8, 8)},
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True),
        id="ceil-include-pad",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 3, strides=2, ceil_mode=True),
        {"x": rand(1, 2, 8, 8)},
        lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True, count_include_pad=False),
        id="ceil-exclude-pad",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 4, strides=3, pads=2),
        {"x": rand(2, 3, 13)},
        lambda x: F.avg_pool1d(x, 4, 3, 2, count_include_pad=False),
        id="1d",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 2, dilations=2),
        {"x": POOL_IMG},
        lambda x: F.unfold(x, 2, dilation=2).reshape(2, 3, 4, 5, 5).mean(2),
        id="dilation",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 3, strides=2, pads=1),
        {"x": POOL_IMG.astype(np.float16)},
        in_float32(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
        id="f16",
        **HALF_TOL,
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 2, strides=2),
        {"x": IMG},
        lambda x: F.avg_pool2d(x, 2, 2),
        symbolic={"x": ("N", 3, "H", "W")},
        id="symbolic",
    ),
    OpCase(
        "AveragePool",
        lambda x: ops.average_pool(x, 2),
        {"x": rand(1, 2, 4, 4, dtype="int8")},
        raises=mdsl.DTypeError,
        id="int8",
    ),
    OpCase(
        "GlobalAveragePool",
        ops.global_average_pool,
        {"x": IMG},
        lambda x: x.mean((2, 3), keepdim=True),
    ),
    OpCase(
        "GlobalAveragePool",
        ops.global_average_pool,
        {"x": rand(2, 4, 3, 5, 6)},
        lambda x: F.adaptive_avg_pool3d(x, 1),
        id="3d",
    ),
    OpCase(
        "GlobalAveragePool",
        ops.global_average_pool,
        {"x": IMG.astype(np.float16)},
        in_float32(lambda x: x.mean((2, 3), keepdim=True)),
        id="f16",
        **HALF_TOL,
    ),
    OpCase(
        "GlobalAveragePool",
        ops.global_average_pool,
        {"x": rand(4, 3)},
        raises=mdsl.ShapeError,
        id="rank2",
    ),
    OpCase(
        "GlobalMaxPool",
        ops.global_max_pool,
        {"x": IMG},
        lambda x: F.adaptive_max_pool2d(x, 1),
    ),
    OpCase(
        "GlobalMaxPool",
        ops.global_max_pool,
        {"x": rand(2, 3, 9, dtype="uint8", lo=0, hi=255)},
        lambda x: x.amax(2, keepdim=True),
        id="uint8-1d",
    ),
]

PARAMS_C4 = {
    "scale": rand(4, seed=20),
    "bias": rand(4, seed=21),
    "mean": rand(4, seed=22),
    "var": rand(4, lo=0.5, hi=2.0, seed=23),
}


def _torch_bn(eps):
    return lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, training=False, eps=eps)


NORM_CASES = [
    OpCase(
        "BatchNormalization",
        ops.batch_norm,
        {"x": rand(2, 4, 5, 5), **PARAMS_C4},
        _torch_bn(1e-5),
        **TOL,
    ),
    OpCase(
        "BatchNormalization",
        lambda x, s, b, m, v: ops.batch_norm(x, s, b, m, v, epsilon=0.1),
        {"x": rand(3, 4), **PARAMS_C4},
        _torch_bn(0.1),
        id="2d-epsilon",
        **TOL,
    ),
    OpCase(
        "BatchNormalization",
        ops.batch_norm,
        {"x": rand(2, 4, 6, dtype="float16"), **PARAMS_C4},
        lambda x, *p: _torch_bn(1e-5)(x.float(), *p).half(),
        id="f16-mixed-params",
        **HALF_TOL,
    ),
    OpCase(
        "BatchNormalization",
        ops.batch_norm,
        {"x": rand(2, 4, 5, 5), **PARAMS_C4},
        _torch_bn(1e-5),
        symbolic={"x": ("N", 4, "H", "W")},
        id="symbolic",
        **TOL,
    ),
    OpCase(
        "BatchNormalization",
        ops.batch_norm,
        {"x": rand(2, 5, 3, 3), **PARAMS_C4},
        raises=mdsl.ShapeError,
        id="channel-mismatch",
    ),
    OpCase(
        "BatchNormalization",
        lambda x, s, b, m, v: ops.batch_norm(x, s, b, m, v, training_mode=True),
        {"x": rand(2, 4, 3, 3), **PARAMS_C4},
        raises=mdsl.GraphError,
        id="training",
    ),
    OpCase(
        "BatchNormalization",
        ops.batch_norm,
        {"x": rand(2, 4), **PARAMS_C4, "bias": PARAMS_C4["bias"].astype(np.float16)},
        raises=mdsl.DTypeError,
        id="scale-bias-dtypes",
    ),
    OpCase(
        "LayerNormalization",
        ops.layer_norm,
        {"x": rand(2, 5, 8), "scale": rand(8, seed=30), "bias": rand(8, seed=31)},
        lambda x, s, b: F.layer_norm(x, (8,), s, b, eps=1e-5),
        **TOL,
    ),
    OpCase(
        "LayerNormalization",
        lambda x, s: ops.layer_norm(x, s, axis=1, epsilon=1e-3),
        {"x": rand(2, 3, 4), "scale": rand(3, 4, seed=32)},
        lambda x, s: F.layer_norm(x, (3, 4), s, eps=1e-3),
        id="axis1-no-bias",
        **TOL,
    ),
    OpCase(
        "LayerNormalization",
        ops.layer_norm,
        {
            "x": rand(2, 5, 8, dtype="float16"),
            "scale": rand(8, dtype="float16", seed=30),
            "bias": rand(8, dtype="float16", seed=31),
        },
        in_float32(lambda x, s, b: F.layer_norm(x, (8,), s, b)),
        id="f16",
        **HALF_TOL,
    ),
    OpCase(
        "LayerNormalization",
        ops.layer_norm,
        {"x": rand(2, 5, 8), "scale": rand(8, seed=30), "bias": rand(8, seed=31)},
        lambda x, s, b: F.layer_norm(x, (8,), s, b),
        symbolic={"x": ("B", "T", 8)},
        id="symbolic",
        **TOL,
    ),
    OpCase(
        "LayerNormalization",
        lambda x, s: ops.layer_norm(x, s, axis=3),
        {"x": rand(2, 3, 4), "scale": rand(4)},
        raises=mdsl.ShapeError,
        id="bad-axis",
    ),
    OpCase(
        "LayerNormalization",
        ops.layer_norm,
        {"x": rand(2, 3, 4), "scale": rand(3)},
        raises=mdsl.ShapeError,
        id="bad-scale",
    ),
    OpCase(
        "LayerNormalization",
        ops.layer_norm,
        {"x": rand(2, 4, dtype="int32"), "scale": rand(4, dtype="int32")},
        raises=mdsl.DTypeError,
        id="int",
    ),
    OpCase(
        "InstanceNormalization",
        ops.instance_norm,
        {"x": rand(2, 3, 5, 6), "scale": rand(3, seed=40), "bias": rand(3, seed=41)},
        lambda x, s, b: F.instance_norm(x, weight=s, bias=b, eps=1e-5),
        **TOL,
    ),
    OpCase(
        "InstanceNormalization",
        lambda x, s, b: ops.instance_norm(x, s, b, epsilon=0.01),
        {"x": rand(2, 3, 7), "scale": rand(3, seed=40), "bias": rand(3, seed=41)},
        lambda x, s, b: F.instance_norm(x, weight=s, bias=b, eps=0.01),
        id="1d-epsilon",
        **TOL,
    ),
    OpCase(
        "InstanceNormalization",
        ops.instance_norm,
        {"x": rand(2, 3), "scale": rand(3), "bias": rand(3)},
        raises=mdsl.ShapeError,
        id="rank2",
    ),
    OpCase(
        "GroupNormalization",
        lambda x, s, b: ops.group_norm(x, s, b, num_groups=2),
        {"x": rand(2, 6, 4, 4), "scale": rand(6, seed=50), "bias": rand(6, seed=51)},
        lambda x, s, b: F.group_norm(x, 2, s, b, eps=1e-5),
        **TOL,
    ),
    OpCase(
        "GroupNormalization",
        lambda x, s, b: ops.group_norm(x, s, b, num_groups=6, epsilon=1e-3),
        {
            "x": rand(2, 6, 5, dtype="float16"),
            "scale": rand(6, dtype="float16", seed=50),
            "bias": rand(6, dtype="float16", seed=51),
        },
        in_float32(lambda x, s, b: F.group_norm(x, 6, s, b, eps=1e-3)),
        id="f16-per-channel",
        **HALF_TOL,
    ),
    OpCase(
        "GroupNormalization",
        lambda x, s, b: ops.group_norm(x, s, b, num_groups=4),
        {"x": rand(2, 6, 4), "scale": rand(6), "bias": rand(6)},
        raises=mdsl.ShapeError,
        id="groups-not-dividing",
    ),
    OpCase(
        "GroupNormalization",
        ops.group_norm,
        {"x": rand(2, 6, 4), "scale": rand(6), "bias": rand(6)},
        raises=mdsl.GraphError,
        id="missing-num-groups",
    ),
]

LOGITS = rand(3, 7, lo=-5, hi=5)
SOFTMAX_CASES = [
    OpCase("Softmax", ops.softmax, {"x": LOGITS}, lambda x: torch.softmax(x, -1)),
    OpCase(
        "Softmax",
        lambda x: ops.softmax(x, axis=0),
        {"x": LOGITS},
        lambda x: torch.softmax(x, 0),
        id="axis0",
    ),
    OpCase(
        "Softmax",
        lambda x: ops.softmax(x, axis=1),
        {"x": rand(2, 4, 3)},
        lambda x: torch.softmax(x, 1),
        symbolic={"x": ("B", 4, "T")},
        id="middle-axis-symbolic",
    ),
    OpCase(
        "Softmax",
        ops.softmax,
        {"x": np.array([[1000.0, 0.0, -1000.0], [88.0, 89.0, 90.0]], np.float32)},
        lambda x: torch.softmax(x, -1),
        id="large-logits",
    ),
    OpCase(
        "Softmax",
        ops.softmax,
        {"x": LOGITS.astype(np.float16)},
        in_float32(lambda x: torch.softmax(x, -1)),
        id="f16",
        **HALF_TOL,
    ),
    OpCase(
        "Softmax",
        lambda x: ops.softmax(x, axis=2),
        {"x": LOGITS},
        raises=mdsl.ShapeError,
        id="bad-axis",
    ),
    OpCase("Softmax", ops.softmax, {"x": rand(3, dtype="int32")}, raises=mdsl.DTypeError, id="int"),
    OpCase("LogSoftmax", ops.log_softmax, {"x": LOGITS}, lambda x: torch.log_softmax(x, -1)),
    OpCase(
        "LogSoftmax",
        lambda x: ops.log_softmax(x, axis=-2),
        {"x": rand(2, 4, 3)},
        lambda x: torch.log_softmax(x, -2),
        id="axis-minus2",
    ),
    OpCase(
        "LogSoftmax",
        ops.log_softmax,
        {"x": np.array([[1000.0, 0.0, -1000.0]], np.float32)},
        lambda x: torch.log_softmax(x, -1),
        id="large-logits",
    ),
    OpCase(
        "LogSoftmax",
        ops.log_softmax,
        {"x": LOGITS.astype(np.float16)},
        in_float32(lambda x: torch.log_softmax(x, -1)),
        id="f16",
        **HALF_TOL,
    ),
    OpCase(
        "LogSoftmax",
        lambda x: ops.log_softmax(x, axis=-3),
        {"x": LOGITS},
        raises=mdsl.ShapeError,
        id="bad-axis",
    ),
]


def _torch_gemm(alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    def run(a, b, c=None):
        y = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
        return y if c is None else y + beta * c

    return run


GEMM_CASES = [
    OpCase(
        "Gemm",
        ops.gemm,
        {"a": rand(3, 4), "b": rand(4, 5, seed=1), "c": rand(3, 5, seed=2)},
        _torch_gemm(),
        **TOL,
    ),
    OpCase(
        "Gemm",
        lambda a, b, c: ops.gemm(a, b, c, alpha=0.5, beta=2.0, transA=True, transB=True),
        {"a": rand(4, 3), "b": rand(5, 4, seed=1), "c": rand(5, seed=2)},
        _torch_gemm(0.5, 2.0, True, True),
        id="trans-alpha-beta-bias-row",
        **TOL,
    ),
    OpCase(
        "Gemm",
        ops.gemm,
        {"a": rand(3, 4), "b": rand(4, 2, seed=1)},
        _torch_gemm(),
        symbolic={"a": ("M", 4)},
        id="no-c-symbolic",
        **TOL,
    ),
    OpCase(
        "Gemm",
        ops.gemm,
        {"a": rand(3, 4, dtype="int32", lo=-5, hi=5), "b": rand(4, 2, dtype="int32", lo=-5, hi=5)},
        _torch_gemm(),
        id="int32",
    ),
    OpCase(
        "Gemm",
        lambda a, b, c: ops.gemm(a, b, c, transB=True),
        {
            "a": rand(3, 8, dtype="float16"),
            "b": rand(5, 8, dtype="float16", seed=1),
            "c": rand(1, 5, dtype="float16", seed=2),
        },
        in_float32(_torch_gemm(trans_b=True)),
        id="f16",
        **HALF_TOL,
    ),
    OpCase(
        "Gemm", ops.gemm, {"a": rand(3, 4), "b": rand(3, 5)}, raises=mdsl.ShapeError, id="bad-k"
    ),
    OpCase(
        "Gemm",
        ops.gemm,
        {"a": rand(2, 3, 4), "b": rand(4, 5)},
        raises=mdsl.ShapeError,
        id="rank3",
    ),
    OpCase(
        "Gemm",
        ops.gemm,
        {"a": rand(3, 4), "b": rand(4, 5), "c": rand(4)},
        raises=mdsl.ShapeError,
        id="bad-c",
    ),
    OpCase(
        "Gemm",
        ops.gemm,
        {"a": rand(3, 4, dtype="int8"), "b": rand(4, 5, dtype="int8")},
        raises=mdsl.DTypeError,
        id="int8",
    ),
    OpCase(
        "MatMul",
        ops.linear,
        {"x": rand(2, 3, 6), "w": rand(6, 4, seed=1), "b": rand(4, seed=2)},
        lambda x, w, b: F.linear(x, w.T, b),
        id="linear",
        **TOL,
    ),
    OpCase(
        "MatMul",
        ops.linear,
        {"x": rand(5, 6), "w": rand(6, 4, seed=1)},
        lambda x, w: F.linear(x, w.T),
        symbolic={"x": ("N", 6)},
        id="linear-no-bias",
        **TOL,
    ),
    OpCase(
        "Dropout",
        lambda x: ops.dropout(x, ratio=0.3, seed=1),
        {"x": LOGITS},
        lambda x: F.dropout(x, 0.3, training=False),
    ),
    OpCase("Dropout", ops.dropout, {"x": LOGITS.astype(np.float16)}, lambda x: x, id="f16", atol=0),
    OpCase(
        "Dropout",
        lambda x: ops.dropout(x, ratio=1.0),
        {"x": LOGITS},
        raises=mdsl.GraphError,
        id="ratio-one",
    ),
]


def _round_half_even_quantize(x, scale, zero, lo, hi):
    """Quantization written with Python's round() (halves to even), element by element."""
    return np.array([min(hi, max(lo, round(float(v) / scale) + zero)) for v in x.ravel()])


def quantized_ref(fn):
    """A torch reference using torch's (deprecated, still exact) quantized tensors."""

    def run(*tensors):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fn(*tensors)

    return run


TIES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 300.0, -300.0], np.float32)
ACTS = rand(2, 3, 4, lo=-3, hi=3)
SCALES = np.array([0.02, 0.05, 0.1], np.float32)
QUANT_CASES = [
    OpCase(
        "QuantizeLinear",
        ops.quantize_linear,
        {"x": ACTS, "scale": np.array(0.03, np.float32), "zero": np.array(5, np.int8)},
        quantized_ref(
            lambda x, s, z: torch.quantize_per_tensor(x, float(s), int(z), torch.qint8).int_repr()
        ),
        id="per-tensor-int8",
    ),
    OpCase(
        "QuantizeLinear",
        ops.quantize_linear,
        {"x": ACTS, "scale": np.array(0.01, np.float32), "zero": np.array(128, np.uint8)},
        quantized_ref(
            lambda x, s, z: torch.quantize_per_tensor(x, float(s), int(z), torch.quint8).int_repr()
        ),
        id="per-tensor-uint8-saturating",
    ),
    OpCase(
        "QuantizeLinear",
        ops.quantize_linear,
        {"x": ACTS, "scale": SCALES, "zero": np.array([0, -3, 7], np.int8)},
        quantized_ref(
            lambda x, s, z: torch.quantize_per_channel(
                x, s.double(), z.long(), 1, torch.qint8
            ).int_repr()
        ),
        id="per-axis-int8",
    ),
    OpCase(
        "QuantizeLinear",
        lambda x, s: ops.quantize_linear(x, s, axis=-1),
        {"x": ACTS, "scale": np.array([0.02, 0.05, 0.1, 0.2], np.float32)},
        quantized_ref(
            lambda x, s: torch.quantize_per_channel(
                x, s.double(), torch.zeros(4, dtype=torch.long), 2, torch.quint8
            ).int_repr()
        ),
        id="per-axis-last-no-zero-point-uint8",
    ),
    OpCase(
        "QuantizeLinear",
        lambda x: ops.quantize_linear(x, np.float32(1.0), output_dtype="int8"),
        {"x": TIES},
        numpy_ref=lambda x: _round_half_even_quantize(x, 1.0, 0, -128, 127).astype(np.int8),
        id="ties-to-even",
    ),
    OpCase(
        "QuantizeLinear",
        lambda x: ops.quantize_linear(x, np.float16(0.5), np.uint8(10)),
        {"x": TIES.astype(np.float16)},
        numpy_ref=lambda x: _round_half_even_quantize(x, 0.5, 10, 0, 255).astype(np.uint8),
        id="f16",
    ),
    OpCase(
        "QuantizeLinear",
        ops.quantize_linear,
        {"x": ACTS, "scale": np.array(0.1, np.float32), "zero": np.array(0.0, np.float32)},
        raises=mdsl.DTypeError,
        id="float-zero-point",
    ),
    OpCase(
        "QuantizeLinear",
        ops.quantize_linear,
        {"x": ACTS, "scale": rand(4), "zero": np.zeros(4, np.int8)},
        raises=mdsl.ShapeError,
        id="per-axis-length",
    ),
    OpCase(
        "QuantizeLinear",
        ops.quantize_linear,
        {"x": ACTS, "scale": SCALES, "zero": np.zeros(2, np.int8)},
        raises=mdsl.ShapeError,
        id="zero-point-shape",
    ),
    OpCase(
        "QuantizeLinear",
        lambda x, s, z: ops.quantize_linear(x, s, z, output_dtype="uint8"),
        {"x": ACTS, "scale": np.array(0.1, np.float32), "zero": np.array(0, np.int8)},
        raises=mdsl.DTypeError,
        id="output-dtype-conflict",
    ),
    OpCase(
        "DequantizeLinear",
        ops.dequantize_linear,
        {
            "q": rand(2, 3, 4, dtype="uint8", lo=0, hi=255),
            "scale": np.array(0.05, np.float32),
            "zero": np.array(128, np.uint8),
        },
        lambda q, s, z: (q.int() - z.int()).float() * s,
        id="per-tensor-uint8",
    ),
    OpCase(
        "DequantizeLinear",
        lambda q, s, z: ops.dequantize_linear(q, s, z, axis=0),
        {
            "q": rand(3, 5, dtype="int8", lo=-128, hi=127),
            "scale": SCALES,
            "zero": np.array([0, -3, 7], np.int8),
        },
        lambda q, s, z: (q.int() - z.int()[:, None]).float() * s[:, None],
        id="per-axis-int8",
    ),
    OpCase(
        "DequantizeLinear",
        ops.dequantize_linear,
        {"q": rand(6, dtype="int32", lo=-(2**20), hi=2**20), "scale": np.array(1e-3, np.float32)},
        lambda q, s: q.float() * s,
        id="int32-no-zero-point",
    ),
    OpCase(
        "DequantizeLinear",
        ops.dequantize_linear,
        {"q": rand(6, dtype="int8"), "scale": np.array(0.25, np.float16)},
        lambda q, s: (q.float() * s.float()).half(),
        id="f16-scale",
        atol=0,
    ),
    OpCase(
        "DequantizeLinear",
        lambda q: ops.dequantize_linear(
            ops.quantize_linear(q, np.float32(0.1), np.int8(0)), np.float32(0.1), np.int8(0)
        ),
        {"x": rand(8, lo=-12, hi=12)},
        quantized_ref(
            lambda x: torch.dequantize(torch.quantize_per_tensor(x, 0.1, 0, torch.qint8))
        ),
        id="round-trip",
    ),
    OpCase(
        "DequantizeLinear",
        ops.dequantize_linear,
        {
            "q": rand(4, dtype="int8"),
            "scale": np.array(0.1, np.float32),
            "zero": np.array(0, np.uint8),
        },
        raises=mdsl.DTypeError,
        id="zero-point-dtype",
    ),
    OpCase(
        "DequantizeLinear",
        ops.dequantize_linear,
        {"q": rand(4), "scale": np.array(0.1, np.float32)},
        raises=mdsl.DTypeError,
        id="float-input",
    ),
]

CASES = CONV_CASES + POOL_CASES + NORM_CASES + SOFTMAX_CASES + GEMM_CASES + QUANT_CASES
