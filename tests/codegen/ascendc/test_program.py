"""Expressions compiled to AscendC vector instructions compute what `mdsl.expr.evaluate`
computes: the instruction lines are executed here by a small numpy interpreter written
from the API's documented semantics (no C++ involved), and the UB temporaries stay few."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from mdsl import expr as E
from mdsl.targets.ascendc.program import NotVectorizable, compile_tiles

N = 64
RNG = np.random.default_rng(0)
X = RNG.standard_normal(N).astype(np.float32) * 3
Y = np.abs(RNG.standard_normal(N)).astype(np.float32) + 0.5  # positive: sqrt, log, pow
S = 0.75  # a per-row scalar

BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Max": np.maximum,
    "Min": np.minimum,
}
WITH_SCALAR = {"Adds": np.add, "Muls": np.multiply, "Maxs": np.maximum, "Mins": np.minimum}
UNARY = {
    "Exp": np.exp,
    "Ln": np.log,
    "Abs": np.abs,
    "Sqrt": np.sqrt,
    "Rsqrt": lambda v: 1 / np.sqrt(v),
    "Reciprocal": lambda v: 1 / v,
    "Relu": lambda v: np.maximum(v, 0),
    "Tanh": np.tanh,
    "Erf": np.vectorize(math.erf, otypes=[np.float64]),
    "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "Sin": np.sin,
    "Cos": np.cos,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Sign": np.sign,
}
CMP = {
    "LT": np.less,
    "GT": np.greater,
    "LE": np.less_equal,
    "GE": np.greater_equal,
    "EQ": np.equal,
    "NE": np.not_equal,
}
SCALAR_FUNCTIONS = {
    "ScalarExp": math.exp,
    "ScalarLn": math.log,
    "ScalarSqrt": math.sqrt,
    "MdslAbs": abs,
    "MdslMax": max,
    "MdslMin": min,
}
NARROW = {"half": np.float16, "int32_t": np.int32}


def split_args(text: str) -> list[str]:
    args, depth, current = [], 0, ""
    for c in text:
        if c == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        depth += (c in "(<") - (c in ")>")
        current += c
    return [*args, current.strip()]


def scalar(text: str, env: dict) -> float:
    """A C++ scalar expression of the generated code, evaluated in Python."""
    py = re.sub(r"(\d(?:\.\d*)?(?:e[-+]?\d+)?)f\b", r"\1", text).replace("(float)", "")
    return float(eval(py, {**SCALAR_FUNCTIONS}, {k: v for k, v in env.items() if np.isscalar(v)}))


def execute(lines: list[str], env: dict) -> dict:
    """Run instruction lines over float32 tiles (numpy arrays) and scalars (floats)."""
    for line in lines:
        name, inner = re.fullmatch(r"(\w+)\((.*)\);", line).groups()
        args = split_args(inner)
        tile = lambda a: env[a]  # noqa: E731
        if name in BINARY:
            env[args[0]] = BINARY[name](tile(args[1]), tile(args[2])).astype(np.float32)
        elif name in WITH_SCALAR:
            env[args[0]] = WITH_SCALAR[name](
                tile(args[1]), np.float32(scalar(args[2], env))
            ).astype(np.float32)
        elif name in UNARY:
            env[args[0]] = UNARY[name](tile(args[1])).astype(np.float32)
        elif name == "Duplicate":
            env[args[0]] = np.full(N, scalar(args[1], env), np.float32)
        elif name in ("Compare", "CompareScalar"):
            other = tile(args[2]) if name == "Compare" else np.float32(scalar(args[2], env))
            env[args[0]] = CMP[args[3].split("::")[1]](tile(args[1]), other)
        elif name == "Select":
            other = (
                tile(args[3]) if "TENSOR_TENSOR" in args[4] else np.float32(scalar(args[3], env))
            )
            env[args[0]] = np.where(env[args[1]], tile(args[2]), other).astype(np.float32)
        elif name == "Cast":  # float32 <-> a narrow view (ReinterpretCast) of a temporary
            if "ReinterpretCast" in args[0]:
                dtype = NARROW[re.search(r"<(\w+)>", args[0]).group(1)]
                value = tile(args[1])
                env[args[0]] = (
                    np.trunc(value).astype(dtype) if dtype == np.int32 else value.astype(dtype)
                )
            else:
                env[args[0]] = tile(args[1]).astype(np.float32)
        elif name == "Power":
            exponent = (
                tile(args[2])
                if args[2] in env and not np.isscalar(env[args[2]])
                else scalar(args[2], env)
            )
            env[args[0]] = np.power(tile(args[1]), exponent).astype(np.float32)
        else:
            raise AssertionError(f"unexpected instruction {line}")
    return env


x, y, s = E.var("x"), E.var("y"), E.var("s")
CASES = {
    "gelu_tanh": 0.5 * x * (1.0 + E.tanh(0.7978845608 * (x + 0.044715 * x**3))),
    "gelu_erf": 0.5 * x * (1.0 + E.erf(x / math.sqrt(2.0))),
    "silu": x * E.sigmoid(x),
    "leaky": E.select(x >= 0, x, 0.1 * x),
    "clip": E.min(E.max(x, -0.5), 0.5),
    "softplus": E.max(x, 0.0) + E.log(1.0 + E.exp(-E.abs(x))),
    "scalar_left": (s - x) / (2.0 - y) + s / y,
    "squares": x**2 + y**0.5 - y**-1.0 + y**-0.5,
    "shared": (x * y) * (x * y) + E.exp(x * y),
    "select_scalars": E.select(x < s, 1.0, s) + E.select(y > x, x, 2.0),
    "scalar_math": x * E.exp(s) + E.sqrt(E.abs(s - 2.0)),
    "casts": E.cast(x * 3.3, "float16") + E.cast(x * 2.7, "int32"),
    "power": E.abs(x) ** y,
    "compare_flipped": E.select(x < 0.5, y, x),
}


@pytest.mark.parametrize("name", CASES)
def test_instructions_compute_the_expression(name):
    root = CASES[name]
    code = compile_tiles(
        {"out": root}, tiles={"x": "x", "y": "y"}, scalars={"s": "s"}, destinations={"out": "out"}
    )
    env = execute(code.lines, {"x": X.copy(), "y": Y.copy(), "s": S})
    expected = E.evaluate(root, {"x": X, "y": Y, "s": np.float32(S)})
    np.testing.assert_allclose(
        env["out"], np.broadcast_to(expected, (N,)).astype(np.float32), rtol=2e-6, atol=2e-6
    )
    assert env["x"] is not None and np.array_equal(env["x"], X)  # inputs are not clobbered
    assert all(f"tmp{i}" in " ".join(code.lines) for i in range(code.temps))


def test_clobberable_inputs_save_temporaries():
    acc, bias, res = E.var("acc"), E.var("bias"), E.var("res")
    root = E.max(E.max(acc + bias, 0.0) + res, 0.0)
    tiles = {"acc": "acc", "bias": "bias", "res": "res"}
    kept = compile_tiles({"o": root}, tiles=tiles, destinations={"o": "out"})
    clobbered = compile_tiles({"o": root}, tiles=tiles, destinations={"o": "out"}, clobber={"acc"})
    assert (kept.temps, clobbered.temps) == (1, 0)
    assert clobbered.lines == [
        "Add(acc, acc, bias, calcLen);",
        "Relu(acc, acc, calcLen);",
        "Add(acc, acc, res, calcLen);",
        "Relu(out, acc, calcLen);",
    ]


def test_temporaries_are_reused():
    # a long chain needs one temporary however long it is
    root = x
    for i in range(20):
        root = E.exp(root * float(i + 2)) + y
    code = compile_tiles({"o": root}, tiles={"x": "x", "y": "y"}, destinations={"o": "out"})
    assert code.temps == 1 and len(code.lines) == 60


def test_several_roots_and_results_without_destination():
    code = compile_tiles(
        {"a": x * y, "b": x + 1.0}, tiles={"x": "x", "y": "y"}, destinations={"a": "out"}
    )
    assert code.results["b"].kind == "tile"
    env = execute(code.lines, {"x": X.copy(), "y": Y.copy()})
    np.testing.assert_allclose(env[code.results["b"].text], X + 1, rtol=1e-6)


def test_library_and_scalar_helpers_are_reported():
    code = compile_tiles(
        {"o": E.tanh(x) * E.exp(s)}, tiles={"x": "x"}, scalars={"s": "s"}, destinations={"o": "out"}
    )
    assert code.library == {"Tanh"} and code.scalar_functions == {"Exp"}


@pytest.mark.parametrize(
    "root, message",
    [
        (E.fmod(x, 3.0), "expression op 'fmod' has no AscendC vector form"),
        ((x > 0) & (y > 0), "expression op 'and' has no AscendC vector form"),
        (E.round(x), "expression op 'round'"),
        (E.cast(x, "float64"), "float64 arithmetic"),
        (E.var("z") + x, "variable 'z' is neither a tile nor a scalar"),
    ],
)
def test_unsupported_expressions_say_what(root, message):
    with pytest.raises(NotVectorizable, match=re.escape(message)):
        compile_tiles({"o": root}, tiles={"x": "x", "y": "y"}, destinations={"o": "out"})


def test_identities_cost_no_instruction():
    root = (x * 1.0 + 0.0) / 1.0 + y
    code = compile_tiles({"o": root}, tiles={"x": "x", "y": "y"}, destinations={"o": "out"})
    assert code.lines == ["Add(out, x, y, calcLen);"]
    shared = x * 1.0  # x is read again afterwards: no aliasing, but still correct
    code = compile_tiles(
        {"o": shared + x}, tiles={"x": "x"}, destinations={"o": "out"}, clobber={"x"}
    )
    env = execute(code.lines, {"x": X.copy()})
    np.testing.assert_allclose(env["out"], 2 * X)
