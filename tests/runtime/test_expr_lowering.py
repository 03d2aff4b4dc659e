"""Every pointwise op with both a numpy and an expression binding computes the same thing
through both, on random data, in float32 and float16."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import mdsl
from mdsl.builder.apply import apply_op
from mdsl.ops import bindings, registry
from mdsl.ops.expr_lowering import LOWERINGS

# attrs to try per op (each dict is one case); ops not listed run with their defaults
ATTR_CASES = {
    "Cast": [{"to": mdsl.float16}, {"to": mdsl.int32}, {"to": mdsl.bool_}],
    "Gelu": [{"approximate": "none"}, {"approximate": "tanh"}],
    "Mod": [{"fmod": False}, {"fmod": True}],
    "LeakyRelu": [{}, {"alpha": 0.3}],
    "HardSigmoid": [{}, {"alpha": 1 / 6, "beta": 0.5}],
    "Elu": [{}, {"alpha": 2.0}],
    "BitShift": [{"direction": "LEFT"}, {"direction": "RIGHT"}],
}
# inputs (by index) kept > 0
POSITIVE = {"Log": {0}, "Sqrt": {0}, "Rsqrt": {0}, "Pow": {0}, "BatchNormalization": {4}}
POSITIVE |= {"QuantizeLinear": {1}, "DequantizeLinear": {1}}
AWAY_FROM_ZERO = {"Div", "Mod", "Reciprocal"}  # last input kept away from 0
BOUNDS = {"Clip": [(), ()]}  # shapes of the inputs after the first
NOT_LOWERED = set()  # pointwise ops with no expression form (none so far)


def _ops_with_both_bindings() -> list[str]:
    return sorted(
        op
        for op, d in registry.all_ops().items()
        if d.category == "pointwise"
        and bindings.get_binding(op, "python") is not None
        and bindings.get_binding(op, "expr") is not None
    )


def _cases():
    cases = []
    for op in _ops_with_both_bindings():
        for i, attrs in enumerate(ATTR_CASES.get(op, [{}])):
            for dtype in ("float32", "float16"):
                cases.append(pytest.param(op, attrs, dtype, id=f"{op}-{i}-{dtype}"))
    return cases


def _input_dtype(slot, float_dtype: str) -> mdsl.DType:
    for choice in (float_dtype, "bool", "int32", "int8", "uint8", "int64"):
        if mdsl.DType.of(choice) in slot.allowed:
            return mdsl.DType.of(choice)
    raise AssertionError(f"no test dtype among {slot.allowed}")


def _data(op: str, index: int, last: bool, shape: tuple, dtype: mdsl.DType, rng) -> np.ndarray:
    if dtype == mdsl.bool_:
        return rng.random(shape) > 0.5
    values = rng.uniform(-3, 3, size=shape)
    if index in POSITIVE.get(op, ()):
        values = rng.uniform(0.05, 4, size=shape)
    elif op in AWAY_FROM_ZERO and last:
        values = np.sign(values + 1e-9) * rng.uniform(0.5, 2, size=shape)
    elif op == "Round":
        values = np.round(values * 4) / 4  # exact halves: the tie rule matters
    elif op == "QuantizeLinear" and index == 0:
        values = values * 100  # saturates int8 / uint8
    return values.astype(dtype.np)


def _inputs(op: str, float_dtype: str):
    """Input slots as (name, dtype, shape, data): the first (3, 4), the rest (4,)."""
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    slots = registry.get_op(op).inputs
    expanded = [s for s in slots for _ in range(3 if s.variadic else 1)]
    shapes = [(3, 4), *BOUNDS.get(op, [(4,)] * (len(expanded) - 1))]
    out = []
    for i, (slot, shape) in enumerate(zip(expanded, shapes)):
        dtype = _input_dtype(slot, float_dtype)
        data = _data(op, i, i == len(expanded) - 1, shape, dtype, rng)
        out.append((f"in{i}", dtype, shape, data))
    return slots, out


def _graph(op: str, attrs: dict, float_dtype: str):
    slots, inputs = _inputs(op, float_dtype)
    with mdsl.Graph(op) as g:
        tensors = [g.input(name, shape, dtype) for name, dtype, shape, _ in inputs]
        args = [tensors] if slots[0].variadic else tensors
        result = apply_op(registry.get_op(op), args, dict(attrs))
        for i, t in enumerate(result if isinstance(result, tuple) else (result,)):
            g.output(t, f"y{i}")
    return g, {name: data for name, _, _, data in inputs}


@pytest.mark.parametrize(("op", "attrs", "float_dtype"), _cases())
def test_python_and_expr_bindings_agree(op, attrs, float_dtype):
    g, feeds = _graph(op, attrs, float_dtype)
    want = mdsl.interpret(g, feeds, impl="python")
    got = mdsl.interpret(g, feeds, impl="expr")
    tol = 1e-5 if float_dtype == "float32" else 2e-3
    for name, w in want.items():
        assert got[name].dtype == w.dtype and got[name].shape == w.shape
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(got[name], w)
        else:
            np.testing.assert_allclose(
                got[name].astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol
            )


def test_expr_runs_really_use_the_expression_bindings(monkeypatch):
    calls = []
    original = LOWERINGS["Tanh"]
    fn = bindings.get_binding("Tanh", "expr").fn
    assert fn is original
    monkeypatch.setitem(
        bindings._TABLE,
        ("Tanh", "expr"),
        bindings.Binding("Tanh", "expr", lambda x: calls.append(1) or original(x), serial=-1),
    )
    g, feeds = _graph("Tanh", {}, "float32")
    mdsl.interpret(g, feeds, impl="expr")
    mdsl.interpret(g, feeds, impl="python")
    assert calls == [1]


def test_every_pointwise_op_has_an_expression_form():
    pointwise = {op for op, d in registry.all_ops().items() if d.category == "pointwise"}
    missing = sorted(
        op
        for op in pointwise - NOT_LOWERED
        if bindings.get_binding(op, "expr") is None and bindings.get_binding(op, "python")
    )
    assert not missing, f"pointwise ops without an entry in mdsl/ops/expr_lowering.py: {missing}"


def test_the_lowering_table_names_only_real_ops_and_each_is_bound():
    unknown = sorted(op for op in LOWERINGS if not registry.has_op(op))
    assert not unknown, f"lowerings for ops that do not exist: {unknown}"
    for op, fn in LOWERINGS.items():
        assert bindings.get_binding(op, "expr").fn is fn
