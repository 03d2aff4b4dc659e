"""Cases for elementwise math, logic, selection and activations, checked against PyTorch.

Half-precision cases compare with PyTorch computing in float32 and rounding once, which
is what mdsl's references promise; tolerances allow one half-precision ulp.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

HALF_TOL = {"rtol": 2e-3, "atol": 2e-3}
BF16_TOL = {"rtol": 1.6e-2, "atol": 1.6e-2}


def in_float32(fn):
    """A torch reference computing in float32 and rounding to the first input's dtype."""

    def run(*tensors):
        wide = [t.float() if t.is_floating_point() else t for t in tensors]
        return fn(*wide).to(tensors[0].dtype)

    return run


def bfloat16_ref(fn):
    """A numpy_ref for bfloat16 inputs (torch cannot take ml_dtypes arrays)."""

    def run(*arrays):
        tensors = [torch.from_numpy(a.astype(np.float32)) for a in arrays]
        return fn(*tensors).numpy().astype(ml_dtypes.bfloat16)

    return run


X = rand(3, 5, lo=-4, hi=4)
X16 = rand(3, 5, dtype="float16", lo=-4, hi=4)
XBF = rand(4, 4, lo=-4, hi=4).astype(ml_dtypes.bfloat16)
POSITIVE = rand(3, 5, lo=0.1, hi=4)
TIES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, -3.2], np.float32)
WITH_NAN = np.array([1.0, np.nan, -np.inf, 0.0, np.nan], np.float32)
A_BOOL, B_BOOL = rand(4, 3, dtype="bool", seed=1), rand(3, dtype="bool", seed=2)


def unary_cases(op, builder, torch_fn, x=X, half=True):
    """A float32 case, a symbolic-batch case and (optionally) a float16 case."""
    cases = [
        OpCase(op, builder, {"x": x}, torch_fn),
        OpCase(op, builder, {"x": x}, torch_fn, symbolic={"x": ("N", x.shape[1])}, id="sym"),
    ]
    if half:
        x16 = x.astype(np.float16)
        cases.append(OpCase(op, builder, {"x": x16}, in_float32(torch_fn), id="f16", **HALF_TOL))
    return cases


CASES = [
    # -- math ------------------------------------------------------------------------------
    *unary_cases("Sigmoid", ops.sigmoid, torch.sigmoid),
    OpCase(
        "Sigmoid",
        ops.sigmoid,
        {"x": np.array([-100.0, -20.0, 0.0, 20.0, 100.0], np.float32)},
        torch.sigmoid,
        atol=1e-30,  # PyTorch flushes sigmoid(-100), a float32 subnormal, to 0
        id="saturating",
    ),
    OpCase(
        "Sigmoid",
        ops.sigmoid,
        {"x": XBF},
        numpy_ref=bfloat16_ref(torch.sigmoid),
        id="bf16",
        **BF16_TOL,
    ),
    OpCase("Sigmoid", ops.sigmoid, {"x": rand(4, dtype="int32")}, raises=mdsl.DTypeError, id="int"),
    *unary_cases("Erf", ops.erf, torch.erf),
    *unary_cases("Reciprocal", ops.reciprocal, torch.reciprocal, x=POSITIVE),
    *unary_cases("Rsqrt", ops.rsqrt, torch.rsqrt, x=POSITIVE),
    *unary_cases("Sin", ops.sin, torch.sin),
    *unary_cases("Cos", ops.cos, torch.cos),
    *unary_cases("Floor", ops.floor, torch.floor),
    *unary_cases("Ceil", ops.ceil, torch.ceil),
    OpCase("Round", ops.round, {"x": TIES}, torch.round, atol=0, id="half-to-even"),
    OpCase("Round", ops.round, {"x": TIES.astype(np.float16)}, torch.round, atol=0, id="f16"),
    OpCase("Round", ops.round, {"x": X}, torch.round, atol=0),
    OpCase("Sign", ops.sign, {"x": np.array([-2.0, 0.0, 3.5], np.float32)}, torch.sign),
    OpCase("Sign", ops.sign, {"x": rand(6, dtype="int32", lo=-3, hi=3)}, torch.sign, id="int"),
    OpCase("IsNaN", ops.is_nan, {"x": WITH_NAN}, torch.isnan),
    OpCase("IsNaN", ops.is_nan, {"x": WITH_NAN.astype(np.float16)}, torch.isnan, id="f16"),
    OpCase("IsNaN", ops.is_nan, {"x": rand(3, dtype="int32")}, raises=mdsl.DTypeError, id="int"),
    # -- Mod -------------------------------------------------------------------------------
    OpCase(
        "Mod",
        ops.mod,
        {"a": rand(4, 5, dtype="int32", lo=-20, hi=20), "b": np.array([3, -3, 7, -7, 5], np.int32)},
        torch.remainder,
        id="int-floor",
    ),
    OpCase(
        "Mod",
        lambda a, b: ops.mod(a, b, fmod=True),
        {"a": rand(4, 5, dtype="int32", lo=-20, hi=20), "b": np.array([3, -3, 7, -7, 5], np.int32)},
        torch.fmod,
        id="int-fmod",
    ),
    OpCase(
        "Mod",
        lambda a, b: ops.mod(a, b, fmod=True),
        {"a": X, "b": np.array([1.5, -1.5, 0.7, -2.0, 3.0], np.float32)},
        torch.fmod,
        id="float-fmod",
    ),
    OpCase(
        "Mod",
        ops.mod,
        {"a": X, "b": np.array([1.5, -1.5, 0.7, -2.0, 3.0], np.float32)},
        torch.remainder,
        atol=1e-5,
        id="float-floor",
    ),
    OpCase(
        "Mod",
        ops.mod,
        {"a": rand(3, dtype="int32"), "b": rand(3, dtype="int64")},
        raises=mdsl.DTypeError,
        id="mixed-dtype",
    ),
    # -- logic -----------------------------------------------------------------------------
    OpCase("Not", ops.logical_not, {"a": A_BOOL}, torch.logical_not),
    OpCase("And", ops.logical_and, {"a": A_BOOL, "b": B_BOOL}, torch.logical_and),
    OpCase("Or", ops.logical_or, {"a": A_BOOL, "b": B_BOOL}, torch.logical_or),
    OpCase("Xor", ops.logical_xor, {"a": A_BOOL, "b": B_BOOL}, torch.logical_xor),
    OpCase("And", ops.logical_and, {"a": X, "b": X}, raises=mdsl.DTypeError, id="float"),
    OpCase("Not", ops.logical_not, {"a": rand(3, dtype="int8")}, raises=mdsl.DTypeError, id="int"),
    # -- selection -------------------------------------------------------------------------
    OpCase(
        "Where",
        ops.where,
        {"c": A_BOOL, "a": rand(4, 1, seed=3), "b": rand(3, seed=4)},
        torch.where,
        id="broadcast",
    ),
    OpCase(
        "Where",
        lambda a: ops.where(a > 0.0, a, 0.0),
        {"a": X},
        lambda a: torch.where(a > 0, a, torch.zeros(())),
        id="scalar-branch",
    ),
    OpCase(
        "Where",
        lambda c, a: ops.where(c, 7, a),
        {"c": rand(5, dtype="bool", seed=5), "a": rand(5, dtype="int64", lo=-9, hi=9)},
        lambda c, a: torch.where(c, torch.tensor(7), a),
        id="int-scalar",
    ),
    OpCase(
        "Where",
        ops.where,
        {"c": A_BOOL, "a": rand(3), "b": rand(3, dtype="float16")},
        raises=mdsl.DTypeError,
        id="mixed-dtype",
    ),
    OpCase(
        "Where", ops.where, {"c": X, "a": X, "b": X}, raises=mdsl.DTypeError, id="float-condition"
    ),
    OpCase(
        "Where",
        ops.where,
        {"c": A_BOOL, "a": rand(4, 2), "b": rand(3)},
        raises=mdsl.ShapeError,
        id="bad-broadcast",
    ),
    OpCase("Clip", lambda x: ops.clip(x, -1.0, 2.5), {"x": X}, lambda x: torch.clamp(x, -1.0, 2.5)),
    OpCase(
        "Clip",
        lambda x: ops.clip(x, None, 1.0),
        {"x": X},
        lambda x: x.clamp(max=1.0),
        id="max-only",
    ),
    OpCase(
        "Clip",
        lambda x: ops.clip(x, 0.5),
        {"x": X16},
        lambda x: x.clamp(min=0.5),
        id="min-only-f16",
    ),
    OpCase(
        "Clip",
        lambda x: ops.clip(x, 2.0, 1.0),
        {"x": X},
        lambda x: torch.clamp(x, 2.0, 1.0),
        id="min-above-max",
    ),
    OpCase(
        "Clip",
        ops.clip,
        {
            "x": rand(6, dtype="int32", lo=-9, hi=9),
            "lo": np.array(-2, np.int32),
            "hi": np.array(3, np.int32),
        },
        lambda x, lo, hi: torch.clamp(x, int(lo), int(hi)),
        id="int-tensor-bounds",
    ),
    OpCase(
        "Clip",
        ops.clip,
        {"x": X, "lo": rand(2), "hi": np.array(1.0, np.float32)},
        raises=mdsl.ShapeError,
        id="vector-bound",
    ),
    OpCase(
        "Clip",
        lambda x: ops.clip(x, 0.5, 3),
        {"x": rand(4, dtype="int32")},
        raises=mdsl.DTypeError,
        id="lossy-int-bound",
    ),
    OpCase(
        "Max",
        lambda a, b, c: ops.maximum(a, b, c),
        {"a": rand(3, 1, seed=6), "b": rand(4, seed=7), "c": rand(3, 4, seed=8)},
        lambda a, b, c: torch.maximum(torch.maximum(a, b), c),
        id="three-broadcast",
    ),
    OpCase(
        "Max",
        lambda a: ops.maximum(a, 0.0),
        {"a": X16},
        lambda a: torch.clamp(a, min=0.0),
        id="scalar-f16",
    ),
    OpCase("Max", ops.maximum, {"a": X}, lambda a: a, id="single"),
    OpCase(
        "Min",
        ops.minimum,
        {
            "a": rand(5, dtype="int64", lo=-9, hi=9),
            "b": rand(5, dtype="int64", lo=-9, hi=9, seed=1),
        },
        torch.minimum,
        id="int",
    ),
    OpCase(
        "Min",
        lambda a, b, c: ops.minimum(a, b, c),
        {"a": rand(2, 3, seed=9), "b": rand(3, seed=10), "c": rand(2, 1, seed=11)},
        lambda a, b, c: torch.minimum(torch.minimum(a, b), c),
        id="three-broadcast",
    ),
    OpCase(
        "Max", ops.maximum, {"a": rand(3), "b": rand(4)}, raises=mdsl.ShapeError, id="bad-broadcast"
    ),
    OpCase(
        "Min",
        ops.minimum,
        {"a": rand(3), "b": rand(3, dtype="int32")},
        raises=mdsl.DTypeError,
        id="mixed-dtype",
    ),
    # -- activations -----------------------------------------------------------------------
    *unary_cases("Gelu", ops.gelu, F.gelu),
    OpCase(
        "Gelu",
        lambda x: ops.gelu(x, approximate="tanh"),
        {"x": X},
        lambda x: F.gelu(x, approximate="tanh"),
        id="tanh",
    ),
    OpCase(
        "Gelu",
        lambda x: ops.gelu(x, approximate="tanh"),
        {"x": X16},
        in_float32(lambda x: F.gelu(x, approximate="tanh")),
        id="tanh-f16",
        **HALF_TOL,
    ),
    OpCase(
        "Gelu",
        ops.gelu,
        {"x": XBF},
        numpy_ref=bfloat16_ref(F.gelu),
        id="bf16",
        **BF16_TOL,
    ),
    OpCase(
        "Gelu",
        lambda x: ops.gelu(x, approximate="fast"),
        {"x": X},
        raises=mdsl.GraphError,
        id="bad-approximate",
    ),
    *unary_cases("Silu", ops.silu, F.silu),
    *unary_cases("LeakyRelu", ops.leaky_relu, F.leaky_relu),
    OpCase(
        "LeakyRelu",
        lambda x: ops.leaky_relu(x, alpha=0.2),
        {"x": X},
        lambda x: F.leaky_relu(x, 0.2),
        id="alpha",
    ),
    OpCase(
        "HardSigmoid",
        ops.hard_sigmoid,
        {"x": X},
        lambda x: torch.clamp(0.2 * x + 0.5, 0.0, 1.0),
        id="onnx-defaults",
    ),
    OpCase(
        "HardSigmoid",
        lambda x: ops.hard_sigmoid(x, alpha=1 / 6, beta=0.5),
        {"x": X},
        F.hardsigmoid,
        id="torch-alpha",
    ),
    OpCase(
        "HardSigmoid",
        lambda x: ops.hard_sigmoid(x, alpha="big"),
        {"x": X},
        raises=mdsl.GraphError,
        id="bad-attr-type",
    ),
    *unary_cases("HardSwish", ops.hard_swish, F.hardswish),
    *unary_cases("Softplus", ops.softplus, F.softplus),
    OpCase(
        "Softplus",
        ops.softplus,
        {"x": np.array([-100.0, -30.0, 0.0, 30.0, 100.0], np.float32)},
        F.softplus,
        id="extremes",
    ),
    *unary_cases("Elu", ops.elu, F.elu),
    OpCase("Elu", lambda x: ops.elu(x, alpha=0.5), {"x": X}, lambda x: F.elu(x, 0.5), id="alpha"),
    OpCase(
        "PRelu",
        ops.prelu,
        {"x": rand(2, 3, 4, 4), "slope": rand(3, 1, 1, lo=0, hi=0.5, seed=12)},
        lambda x, s: F.prelu(x, s.reshape(-1)),
        id="per-channel",
    ),
    OpCase(
        "PRelu",
        ops.prelu,
        {"x": X16, "slope": np.array([0.25], np.float16)},
        in_float32(F.prelu),
        id="shared-f16",
        **HALF_TOL,
    ),
    OpCase(
        "PRelu",
        ops.prelu,
        {"x": rand(2, 3), "slope": rand(2, 3, 1)},
        raises=mdsl.ShapeError,
        id="slope-too-big",
    ),
]
