"""Copies of a contiguous run forwarded to their readers (`mdsl.codegen.copy_forwarding`),
and a Gather of one constant index rewritten as a Slice (`mdsl.passes.simplify`): which
copies go, and results against numpy and the interpreter at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import kir

RNG = np.random.default_rng(7)


def _copies_of(exe, op_type: str) -> int:
    return sum(1 for k in exe.plan.kernels if any(n.op_type == op_type for n in k.nodes))


def _equal(exe, g, feeds, want: dict) -> None:
    got, interpreted = exe(feeds), mdsl.interpret(g, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(got[name], interpreted[name], rtol=1e-6, atol=1e-6)


def _qkv() -> mdsl.Graph:
    """Q, K and V picked from one [3, 5, 2, 8] tensor by constant Gathers, then moved
    to heads first, scaled, combined pointwise, and a softmax over V's rows."""
    with mdsl.Graph("qkv") as g:
        x = g.input("x", (3, 5, 2, 8))
        q, k, v = (ops.gather(x, g.const(f"i{i}", np.array(i)), axis=0) for i in range(3))
        heads = [ops.transpose(t, perm=(1, 0, 2)) for t in (q, k, v)]
        g.output(heads[0] * 0.5 + ops.relu(heads[1]), "qk")
        g.output(ops.softmax(heads[2], axis=-1), "v")
    return g


def _numpy_qkv(x):
    q, k, v = (x[i].transpose(1, 0, 2) for i in range(3))
    e = np.exp(v - v.max(-1, keepdims=True))
    return {"qk": q * 0.5 + np.maximum(k, 0), "v": e / e.sum(-1, keepdims=True)}


@pytest.mark.parametrize("threads", [1, 2])
def test_constant_gathers_are_read_where_they_lie(threads):
    g = _qkv()
    exe = mdsl.compile(g, "c", threads=threads)
    x = RNG.standard_normal((3, 5, 2, 8)).astype(np.float32)
    _equal(exe, g, {"x": x}, _numpy_qkv(x))
    assert _copies_of(exe, "Gather") == 0 and _copies_of(exe, "Slice") == 0
    offsets = sorted(
        a.offset for k in exe.plan.kernels for a in getattr(k, "loads", {}).values()
        if a.buffer == "in0"
    )  # fmt: skip
    assert offsets == [0, 80, 160]  # Q, K and V: runs of 5 x 2 x 8 floats


def test_a_gather_of_one_constant_index_becomes_a_slice():
    with mdsl.Graph("picks") as g:
        x = g.input("x", (4, 3))
        g.output(ops.gather(x, g.const("last", np.array(-1)), axis=0), "row")
        g.output(ops.gather(x, g.const("one", np.array([1])), axis=1), "column")
        g.output(ops.gather(x, g.const("two", np.array([0, 2])), axis=1), "columns")
    opt = mdsl.optimize(g)
    assert sorted(n.op_type for n in opt if n.op_type in ("Gather", "Slice", "Squeeze")) == [
        "Gather",  # two indices stay a Gather
        "Slice",
        "Slice",
        "Squeeze",
    ]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    exe = mdsl.compile(g, "c")
    want = {"row": x[-1], "column": x[:, [1]], "columns": x[:, [0, 2]]}
    _equal(exe, g, {"x": x}, want)


def test_an_out_of_range_constant_index_still_fails_at_run_time():
    with mdsl.Graph("past_the_end") as g:
        x = g.input("x", (3, 4))
        g.output(ops.gather(x, g.const("i", np.array(3)), axis=0) + 1.0, "y")
    exe = mdsl.compile(g, "c")
    with pytest.raises(mdsl.MdslError, match="out of range"):
        exe(x=np.zeros((3, 4), np.float32))


def test_a_slice_a_gemm_reads_keeps_its_copy():
    """A GEMM names its operands' buffers, with no offset of their own."""
    w_value = RNG.standard_normal((6, 5)).astype(np.float32)
    with mdsl.Graph("slice_matmul") as g:
        x = g.input("x", (4, 6, 6))
        w = g.const("w", w_value)
        g.output(ops.matmul(ops.slice(x, starts=(1,), ends=(2,), axes=(0,)), w), "y")
    exe = mdsl.compile(g, "c")
    x = RNG.standard_normal((4, 6, 6)).astype(np.float32)
    _equal(exe, g, {"x": x}, {"y": x[1:2] @ w_value})
    assert any(isinstance(k, kir.Gemm) for k in exe.plan.kernels)
    assert _copies_of(exe, "Slice") == 1


def test_a_strided_slice_keeps_its_copy():
    """Every other row is no run of the source."""
    with mdsl.Graph("every_other") as g:
        x = g.input("x", (6, 4))
        g.output(ops.relu(ops.slice(x, starts=(0,), ends=(6,), axes=(0,), steps=(2,))), "y")
    exe = mdsl.compile(g, "c")
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    _equal(exe, g, {"x": x}, {"y": np.maximum(x[::2], 0)})
