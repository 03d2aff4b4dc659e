"""The custom-op example (QLinearMatMul, QuantizeSymmetric) against PyTorch.

Tolerances: quantized values (int8) must be equal; float32 products over K <= 32 terms
use rtol 1e-5 / atol 1e-5.

The example registers its ops and bindings when imported. Other tests read the global
registries (the op table checks every registered op has a case), so each test here
registers them afresh (reloading the example) inside a sandbox that undoes them.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mdsl
from mdsl.runtime.kernels import choose_binding
from tests.op_sandbox import restored_registries

with restored_registries():
    from examples import custom_op

RTOL, ATOL = 1e-5, 1e-5
EXAMPLE = Path(custom_op.__file__)


@pytest.fixture(autouse=True)
def example_ops():
    """The example's ops and numpy bindings, registered for one test only."""
    with restored_registries():
        importlib.reload(custom_op)
        yield


def torch_quantize(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)


def torch_qlinear_matmul(a, b, scale_a, scale_b, trans_a=False):
    a = a.T if trans_a else a
    return (a.float() * scale_a) @ (b.float() * scale_b)


def test_prototype_declares_dtypes_and_attrs():
    opdef = custom_op.qlinear_matmul.opdef
    allowed = {s.name: sorted(d.value for d in s.allowed) for s in opdef.inputs}
    assert allowed == {
        "a": ["float16", "int8"],
        "b": ["float16", "int8"],
        "scale_a": ["float16", "float32"],
        "scale_b": ["float16", "float32"],
    }
    assert [sorted(d.value for d in s.allowed) for s in opdef.outputs] == [["float32"]]
    assert opdef.attrs["trans_a"].default is False
    assert custom_op.qlinear_matmul.op_type == "QLinearMatMul"


@pytest.mark.parametrize("batch", [3, 8])
def test_int8_linear_matches_torch_for_any_batch(batch):
    g = custom_op.build()
    x = np.random.default_rng(batch).normal(0, 3, (batch, 32)).astype(np.float32)
    captured = mdsl.interpret(g, {"x": x}, capture=True, impl="python")
    xq = torch_quantize(torch.from_numpy(x), 0.05)
    assert xq.abs().max() == 127  # saturation is exercised
    np.testing.assert_array_equal(captured["Int8Linear/Quantize"], xq.numpy())
    w = torch.from_numpy(custom_op.int8_weights(32, 16))
    expected = torch_qlinear_matmul(xq, w, 0.05, 0.01).numpy()
    assert captured["y"].dtype == np.float32 and captured["y"].shape == (batch, 16)
    np.testing.assert_allclose(captured["y"], expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_trans_a_matches_torch(dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(-100, 100, (6, 4)).astype(dtype)  # (K, M)
    b = rng.integers(-100, 100, (6, 5)).astype(dtype)
    with mdsl.Graph("trans_a") as g:
        ta, tb = g.input("a", ("K", "M"), dtype), g.input("b", ("K", 5), dtype)
        sa, sb = g.const("sa", np.float16(0.125)), g.const("sb", np.float32(0.03))
        g.output(custom_op.qlinear_matmul(ta, tb, sa, sb, trans_a=True), "y")
    assert g.outputs["y"].shape == (mdsl.Dim("M"), 5)
    y = mdsl.interpret(g, {"a": a, "b": b})["y"]
    expected = torch_qlinear_matmul(torch.from_numpy(a), torch.from_numpy(b), 0.125, 0.03, True)
    np.testing.assert_allclose(y, expected.numpy(), rtol=RTOL, atol=ATOL)


def test_k_mismatch_is_a_shape_error_at_the_users_line():
    with mdsl.Graph("bad") as g:
        a, b = g.input("a", (4, 8), "int8"), g.input("b", (6, 2), "int8")
        s = g.const("s", np.float32(1.0))
        with pytest.raises(mdsl.ShapeError) as info, mdsl.scope("Head"):
            line = inspect.currentframe().f_lineno + 1
            custom_op.qlinear_matmul(a, b, s, s, name="QMatMul")
        g.output(a, "a")
    error = info.value
    assert error.message == "K of a (8) != K of b (6)"
    assert (error.node, error.op_type) == ("Head/QMatMul", "QLinearMatMul")
    assert error.source.endswith(f"{Path(__file__).name}:{line}")
    assert str(error).startswith("Head/QMatMul (QLinearMatMul) at ")


def test_trans_a_changes_which_dim_is_k():
    with mdsl.Graph("bad") as g:
        a, b = g.input("a", (4, 8), "int8"), g.input("b", (8, 2), "int8")
        s = g.const("s", np.float32(1.0))
        with pytest.raises(mdsl.ShapeError, match=r"K of a \(4\) != K of b \(8\)"):
            custom_op.qlinear_matmul(a, b, s, s, trans_a=True)
        g.output(a, "a")


@pytest.mark.parametrize(
    ("dtypes", "error", "match"),
    [
        (("int32", "int8", "float32"), mdsl.DTypeError, "input 'a' is int32"),
        (("int8", "int8", "int8"), mdsl.DTypeError, "input 'scale_a' is int8"),
    ],
)
def test_dtype_outside_the_prototype_is_a_dtype_error(dtypes, error, match):
    a_dtype, b_dtype, scale_dtype = dtypes
    with mdsl.Graph("bad") as g:
        a, b = g.input("a", (4, 8), a_dtype), g.input("b", (8, 2), b_dtype)
        s = g.input("s", (), scale_dtype)
        with pytest.raises(error, match=match):
            custom_op.qlinear_matmul(a, b, s, s)
        g.output(a, "a")


def test_bad_attr_and_rank_are_reported():
    with mdsl.Graph("bad") as g:
        a, b = g.input("a", (4, 8), "int8"), g.input("b", (2, 8, 2), "int8")
        s = g.const("s", np.float32(1.0))
        with pytest.raises(mdsl.ShapeError, match="must be matrices"):
            custom_op.qlinear_matmul(a, b, s, s)
        with pytest.raises(mdsl.GraphError, match="trans_b"):
            custom_op.qlinear_matmul(a, a, s, s, trans_b=True)
        g.output(a, "a")


def test_quantize_expr_and_numpy_bindings_match_torch():
    values = [0.0, 0.5, 1.5, 2.5, -0.5, -1.5, 0.49, -0.51, 63.5, -63.5, 1e6, -1e6, 127.4]
    x = np.array(values, np.float32) * np.float32(0.5)
    with mdsl.Graph("quantize") as g:
        t = g.input("x", ("N",))
        g.output(custom_op.quantize_symmetric(t, g.const("s", np.float32(0.5))), "q")
    expected = torch_quantize(torch.from_numpy(x), 0.5).numpy()
    custom_op.bind_expr_quantize()
    for impl in ("python", "expr", "auto"):
        q = mdsl.interpret(g, {"x": x}, impl=impl)["q"]
        assert q.dtype == np.int8
        np.testing.assert_array_equal(q, expected, err_msg=impl)


def test_rebinding_changes_no_graph_and_no_result():
    g = custom_op.build()
    before = g.to_json()
    x = np.random.default_rng(5).normal(0, 2, (4, 32)).astype(np.float32)
    numpy_result = mdsl.interpret(g, {"x": x})["y"]
    assert choose_binding("QuantizeSymmetric").backend == "python"
    custom_op.bind_expr_quantize()
    assert choose_binding("QuantizeSymmetric").backend == "expr"  # the newest binding wins
    assert choose_binding("QLinearMatMul", "expr").backend == "python"  # no expr form
    np.testing.assert_array_equal(mdsl.interpret(g, {"x": x})["y"], numpy_result)
    np.testing.assert_array_equal(mdsl.interpret(g, {"x": x}, impl="expr")["y"], numpy_result)
    assert g.to_json() == before


def test_runs_as_a_script():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "identical with the numpy and the" in done.stdout
    assert "ShapeError: QLinearMatMul (QLinearMatMul) at " in done.stdout
