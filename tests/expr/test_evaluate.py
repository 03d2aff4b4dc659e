"""Evaluating expressions with numpy, checked against PyTorch and plain Python."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mdsl
from mdsl import expr as E

x, y = E.var("x"), E.var("y")
RNG = np.random.default_rng(7)
X = RNG.uniform(-3, 3, size=(4, 5)).astype(np.float32)
Y = RNG.uniform(0.5, 2, size=(5,)).astype(np.float32)


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


CASES = [
    ("exp", E.exp(x), lambda a, b: torch.exp(a)),
    ("log", E.log(y), lambda a, b: torch.log(b)),
    ("tanh", E.tanh(x), lambda a, b: torch.tanh(a)),
    ("sigmoid", E.sigmoid(x), lambda a, b: torch.sigmoid(a)),
    ("erf", E.erf(x), lambda a, b: torch.erf(a)),
    ("sqrt", E.sqrt(y), lambda a, b: torch.sqrt(b)),
    ("rsqrt", E.rsqrt(y), lambda a, b: torch.rsqrt(b)),
    ("abs", abs(x), lambda a, b: torch.abs(a)),
    ("sign", E.sign(x), lambda a, b: torch.sign(a)),
    ("floor", E.floor(x), lambda a, b: torch.floor(a)),
    ("ceil", E.ceil(x), lambda a, b: torch.ceil(a)),
    ("round", E.round(x * 2), lambda a, b: torch.round(a * 2)),
    ("sin-cos", E.sin(x) + E.cos(y), lambda a, b: torch.sin(a) + torch.cos(b)),
    ("min-max", E.min(E.max(x, -1.0), y), lambda a, b: torch.minimum(a.clamp(min=-1.0), b)),
    ("pow", E.pow(y, x), lambda a, b: torch.pow(b, a)),
    ("mod", x % y, lambda a, b: torch.remainder(a, b)),
    ("fmod", E.fmod(x, y), lambda a, b: torch.fmod(a, b)),
    ("div", x / y - 1, lambda a, b: a / b - 1),
    ("select", E.select(x > 0, x, 0.1 * x), lambda a, b: torch.where(a > 0, a, 0.1 * a)),
    ("compare", (x <= y) ^ (x == x), lambda a, b: (a <= b) ^ (a == a)),
    ("gelu-tanh", 0.5 * x * (1 + E.tanh(0.7978845608 * (x + 0.044715 * x**3))),
     lambda a, b: torch.nn.functional.gelu(a, approximate="tanh")),
    ("gelu", 0.5 * x * (1.0 + E.erf(x / math.sqrt(2.0))),
     lambda a, b: torch.nn.functional.gelu(a)),
]  # fmt: skip


@pytest.mark.parametrize(("e", "ref"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_evaluation_matches_torch(e, ref):
    env = {"x": X, "y": Y}
    got = E.evaluate(e, env)
    want = ref(_t(X), _t(Y)).numpy()
    assert got.shape == np.broadcast_shapes(*(env[v].shape for v in E.variables(e)))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_constants_take_the_dtype_of_the_arrays_they_meet():
    h = np.linspace(-1, 1, 7).astype(np.float16)
    assert E.evaluate(x * 1.702 + 1, {"x": h}).dtype == np.float16
    assert E.evaluate(E.select(x > 0, x, 0.0), {"x": h}).dtype == np.float16
    assert E.evaluate(E.erf(x), {"x": h}).dtype == np.float16
    assert E.evaluate(x + 1, {"x": np.arange(3, dtype=np.int8)}).dtype == np.int8
    assert E.evaluate(E.cast(x, "float16") * 2, {"x": X}).dtype == np.float16
    bf = np.ones(3, mdsl.bfloat16.np)
    assert E.evaluate(E.exp(x) * 2, {"x": bf}).dtype == mdsl.bfloat16.np


def test_integer_division_truncates_and_float_division_does_not():
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    got = E.evaluate(x / y, {"x": a, "y": b})
    assert got.dtype == np.int32
    assert got.tolist() == [math.trunc(p / q) for p, q in zip(a.tolist(), b.tolist())]
    big = np.array([2**62 + 1], np.int64)  # float64 rounding would lose the low bits
    assert E.evaluate(x / 1, {"x": big}).tolist() == [2**62 + 1]
    assert E.evaluate(x / y, {"x": a.astype(np.float32), "y": b.astype(np.float32)}).tolist() == [
        3.5,
        -3.5,
        -3.5,
        3.5,
    ]


def test_broadcasting_and_shared_subexpressions():
    s = x * y
    got = E.evaluate(s + s * s, {"x": X, "y": Y})
    want = X * Y + (X * Y) ** 2
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.shape == (4, 5)


def test_several_outputs_come_back_as_a_tuple():
    lo, hi = E.evaluate([E.min(x, y), E.max(x, y)], {"x": X, "y": Y})
    np.testing.assert_array_equal(lo, np.minimum(X, Y))
    np.testing.assert_array_equal(hi, np.maximum(X, Y))


def test_ieee_special_values_without_warnings():
    with np.errstate(all="raise"):  # evaluate must not leak floating-point warnings
        got = E.evaluate(
            [1 / x, E.log(x), E.sigmoid(x), E.exp(x)],
            {"x": np.array([0.0, -1.0, -1000.0, 1000.0], np.float32)},
        )
    inv, log, sig, ex = got
    assert inv[0] == np.inf and np.isnan(log[1]) and log[0] == -np.inf
    assert sig[2] == 0.0 and sig[3] == 1.0 and ex[3] == np.inf


def test_an_expression_of_constants_evaluates_to_a_0d_array():
    got = E.evaluate(E.const(2) * 3, {})
    assert got.shape == () and got == 6


def test_unbound_variables_and_failing_ops_raise_execution_errors():
    with pytest.raises(mdsl.ExecutionError, match=r"variable 'y' has no value \(bound: x\)"):
        E.evaluate(x + y, {"x": X})
    with pytest.raises(mdsl.ExecutionError, match=r"x \*\* y failed: ValueError.*int64"):
        E.evaluate(x**y, {"x": np.array([2]), "y": np.array([-1])})


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_a_float_cast_to_an_integer_saturates_and_nan_becomes_zero(dtype):
    info = np.iinfo(dtype)
    values = np.array([1e30, -1e30, np.inf, -np.inf, np.nan, 2.7, -2.7, 300.0], np.float32)
    got = E.evaluate(E.cast(x, dtype), {"x": values})
    want = [info.max, info.min, info.max, info.min, 0, 2, max(-2, info.min), min(300, info.max)]
    assert got.dtype == np.dtype(dtype) and got.tolist() == want
    assert E.evaluate(E.cast(x, dtype), {"x": np.array([5, -1], np.int64)}).dtype == dtype


def test_casts_to_bool_and_between_floats_follow_numpy():
    got = E.evaluate(E.cast(x, "bool"), {"x": np.array([0.0, -0.0, 0.5, np.nan])})
    assert got.tolist() == [False, False, True, True]
    assert E.evaluate(E.cast(x, "float16"), {"x": np.array([1e6])}).tolist() == [np.inf]
