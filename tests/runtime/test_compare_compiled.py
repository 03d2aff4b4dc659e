"""`mdsl.compare` against compiled backends: debug builds materialize every node, so rows
align node by node even inside fused kernels, and a planted bug shows at its node."""

from __future__ import annotations

import importlib.util
import shutil

import numpy as np
import pytest

import mdsl
from mdsl import expr as E
from mdsl.runtime import compare as compare_module

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
NUMBA = importlib.util.find_spec("mdsl.runtime.numba_backend") is not None


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One build cache for this module's tests (none of them damages cache entries)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def private_cache(module_cache, monkeypatch):
    monkeypatch.setenv("MDSL_CACHE_DIR", str(module_cache))


def chain_graph():
    """Mul, Exp, Add, Tanh: one fused pointwise kernel; then a softmax row kernel."""
    with mdsl.Graph("chain") as g:
        x = g.input("x", ("N", 8))
        t = mdsl.ops.tanh(mdsl.ops.exp(x * 0.5) + 1.0)
        g.output(mdsl.ops.softmax(t * 3.0), "y")
    return g


FEEDS = {"x": np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)}


def test_c_and_numba_are_compare_backends_when_available():
    assert "c" in compare_module.backends()
    assert ("numba" in compare_module.backends()) == NUMBA


def test_debug_build_keeps_fusion_and_stores_every_member():
    g = chain_graph()
    plain = mdsl.compile(g, backend="c")
    plain(FEEDS)
    debug = mdsl.compile(g, backend="c", debug=True)
    captured = debug.run(FEEDS, capture=True)
    assert [k.nodes for k in debug.kernels] == [k.nodes for k in plain.kernels]
    assert any(len(k.nodes) >= 4 for k in debug.kernels)  # fused, yet every value stored
    reference = mdsl.interpret(g, FEEDS, capture=True)
    reference = {k: v for k, v in reference.items() if not k.startswith("Const")}
    assert set(reference) <= set(captured)
    for name, want in reference.items():
        np.testing.assert_allclose(captured[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_debug_build_call_returns_only_the_users_outputs():
    exe = mdsl.compile(chain_graph(), backend="c", debug=True)
    out = exe(FEEDS)
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], mdsl.interpret(chain_graph(), FEEDS)["y"], rtol=1e-5)


def test_capture_needs_a_debug_build():
    exe = mdsl.compile(chain_graph(), backend="c")
    with pytest.raises(mdsl.ExecutionError, match="debug=True"):
        exe.run(FEEDS, capture=True)


def test_compare_c_aligns_every_node_of_fused_kernels():
    g = chain_graph()
    rep = mdsl.compare(g, FEEDS, backend="c", reference="python")
    assert rep.ok, rep.table()
    computed = [r for r in rep.rows if r.op_type not in ("Const",)]
    assert [r.node for r in computed] == ["Mul", "Exp", "Add", "Tanh", "Mul_1", "Softmax"]
    assert all(not r.skipped and r.cosine > 0.9999 for r in computed), rep.table()


def declare_swish_with_planted_bug():
    """Swish whose numpy binding is right and whose expr binding (what the C backend
    fuses) is wrong: the compiled graph differs from the interpreter at Swish only."""

    @mdsl.op_proto(
        "PlantedSwish", inputs={"x": "float32"}, outputs={"y": "float32"}, category="pointwise"
    )
    def swish(x):
        return x

    mdsl.register_op_impl("PlantedSwish", lambda x: x / (1.0 + np.exp(-x)))
    mdsl.register_op_impl("PlantedSwish", lambda x: x * E.sigmoid(1.5 * x), backend="expr")
    return swish


COMPILED = [
    "c",
    pytest.param("numba", marks=pytest.mark.skipif(not NUMBA, reason="no numba backend")),
]


@pytest.mark.parametrize("backend", COMPILED)
def test_a_planted_bug_is_the_first_mismatch_inside_a_fused_kernel(sandbox, backend):
    swish = declare_swish_with_planted_bug()
    with mdsl.Graph("planted") as g:
        x = g.input("x", (16,))
        g.output(mdsl.ops.tanh(swish(x * 2.0) + 1.0), "y")
    feeds = {"x": np.linspace(-3, 3, 16, dtype=np.float32)}
    exe = mdsl.compile(g, backend=backend, debug=True)
    exe(feeds)
    assert [k.nodes for k in exe.kernels] == [("Mul", "PlantedSwish", "Add", "Tanh")]
    rep = mdsl.compare(g, feeds, backend=backend, reference="python")
    assert not rep.ok
    assert rep.first_mismatch.node == "PlantedSwish"
    assert rep.row("Mul").ok and not rep.row("Mul").skipped
    assert [r.node for r in rep.mismatches] == ["PlantedSwish", "Add", "Tanh"]
    assert "first mismatch: PlantedSwish (PlantedSwish)" in rep.table()


def test_compare_against_another_compiled_run_of_a_gemm_graph():
    with mdsl.Graph("mlp") as g:
        x = g.input("x", ("B", 16))
        h = mdsl.ops.gelu(x @ mdsl.param("w1", (16, 32), seed=1) + mdsl.param("b1", (32,), seed=2))
        g.output(
            mdsl.ops.layer_norm(
                h, mdsl.param("s", (32,), init="ones"), mdsl.param("b", (32,), init="zeros")
            ),
            "y",
        )
    feeds = {"x": np.random.default_rng(3).normal(size=(5, 16)).astype(np.float32)}
    rep = mdsl.compare(g, feeds, backend="c", reference="python", rtol=1e-4, atol=1e-5)
    assert rep.ok, rep.table()
    assert not rep.row("Gelu").skipped and not rep.row("LayerNormalization").skipped
    assert mdsl.compare(g, feeds, backend="c", reference="c").ok


def test_every_output_of_a_multi_output_node_is_captured():
    with mdsl.Graph("split") as g:
        x = g.input("x", (4, 6))
        a, b = mdsl.ops.split(mdsl.ops.exp(x), axis=1, num_outputs=2)
        g.output(a * b, "y")
    feeds = {"x": np.random.default_rng(5).normal(size=(4, 6)).astype(np.float32)}
    captured = mdsl.compile(g, backend="c", debug=True).run(feeds, capture=True)
    np.testing.assert_allclose(captured["Split:1"], np.exp(feeds["x"][:, 3:]), rtol=1e-6)
    np.testing.assert_allclose(captured["Split"], np.exp(feeds["x"][:, :3]), rtol=1e-6)
    assert mdsl.compare(g, feeds, backend="c").ok


def test_a_graph_whose_every_node_is_an_output_captures_too():
    with mdsl.Graph("single") as g:
        g.output(mdsl.ops.exp(g.input("x", (3,))), "y")
    exe = mdsl.compile(g, backend="c", debug=True)
    assert exe.debug_outputs == {}
    captured = exe.run({"x": np.zeros(3, np.float32)}, capture=True)
    assert set(captured) == {"x", "Exp", "y"}
    assert mdsl.compare(g, {"x": np.ones(3, np.float32)}, backend="c").ok
