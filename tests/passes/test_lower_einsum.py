"""lower_einsum: float Einsums (every equation of ONNX's Einsum cases, and the shapes
models use) become Transpose/Reshape/MatMul/ReduceSum/Mul, match torch.einsum on the
interpreter and compile to C with no callback; the Einsums the pass cannot take keep
their node and still run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mdsl
from mdsl import ops

LOWERED = ("Transpose", "Reshape", "MatMul", "ReduceSum", "Mul")
EQUATIONS = [
    # ONNX's cases
    ("...ii ->...i", [(3, 5, 5)]),
    ("bij, bjk -> bik", [(5, 2, 3), (5, 3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("->", [()]),
    ("ij->i", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    # attention, bilinear and chains
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bqhd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ij,kl->ijkl", [(2, 3), (4, 5)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("i,j->", [(3,), (4,)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ii", [(4, 4)]),
]


def _graph(equation, shapes, dtype="float32", declared=None):
    with mdsl.Graph("einsum") as g:
        xs = [g.input(f"x{i}", declared[i] if declared else s, dtype) for i, s in enumerate(shapes)]
        g.output(ops.einsum(equation, *xs), "y")
    return g


@pytest.mark.parametrize(("equation", "shapes"), EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_float_einsums_lower_and_compile_without_callbacks(equation, shapes):
    rng = np.random.default_rng(len(equation))
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    want = torch.einsum(equation.replace(" ", ""), *map(torch.from_numpy, feeds.values())).numpy()
    g = _graph(equation, shapes)
    lowered = mdsl.passes.run(g, ["lower_einsum"])
    assert {n.op_type for n in lowered.nodes} <= {"Input", "Output", "Const", *LOWERED}
    np.testing.assert_allclose(mdsl.interpret(lowered, feeds)["y"], want, rtol=1e-5, atol=1e-5)
    exe = mdsl.compile(g, backend="c")
    np.testing.assert_allclose(exe(**feeds)["y"], want, rtol=1e-5, atol=1e-5)
    assert exe.plan.fallbacks == []


def test_a_symbolic_batch_label_stays_a_matmul_batch_dim():
    g = _graph("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], declared=[("B", 3, 4), ("B", 4, 5)])
    assert [n.op_type for n in mdsl.passes.run(g, ["lower_einsum"]).nodes][2:-1] == ["MatMul"]
    exe = mdsl.compile(g, backend="c")
    a, b = np.ones((6, 3, 4), np.float32), np.ones((6, 4, 5), np.float32)
    np.testing.assert_array_equal(exe(x0=a, x1=b)["y"], np.full((6, 3, 5), 4, np.float32))
    assert exe.plan.fallbacks == []


@pytest.mark.parametrize(
    ("equation", "shapes", "dtype", "declared"),
    [
        ("ij,jk->ik", [(3, 4), (4, 5)], "int32", None),  # no BLAS for int32: kept
        ("ij,jk->ik", [(3, 4), (4, 5)], "float32", [("M", "K"), ("K", 5)]),  # fine: one label each
        ("abc,cd->abd", [(2, 3, 4), (4, 5)], "float32", [("A", 3, 4), (4, 5)]),  # A*3 merged
    ],
    ids=["int32", "symbolic-single-labels", "symbolic-merged"],
)
def test_einsums_the_pass_keeps_or_lowers_still_match_torch(equation, shapes, dtype, declared):
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": rng.integers(-3, 3, s).astype(dtype) for i, s in enumerate(shapes)}
    want = torch.einsum(equation, *map(torch.from_numpy, feeds.values())).numpy()
    g = _graph(equation, shapes, dtype, declared)
    kept = any(n.op_type == "Einsum" for n in mdsl.passes.run(g, ["lower_einsum"]).nodes)
    assert kept == (dtype == "int32" or equation == "abc,cd->abd")
    np.testing.assert_allclose(mdsl.compile(g, backend="c")(**feeds)["y"], want, rtol=1e-5)
