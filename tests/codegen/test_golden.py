"""Golden files: the generated C of small graphs (tests/golden/graphs.py), kept as
tests/golden/<graph>.c, so a change to lowering, templates or rendering shows as a diff.

After an intended change, regenerate and review:

    MDSL_UPDATE_GOLDEN=1 python -m pytest tests/codegen/test_golden.py

Nodes record their source relative to the working directory, so the graphs are built from
the repository root; the golden files then read `tests/golden/graphs.py:<line>`.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from pathlib import Path

import numpy as np
import pytest

import mdsl
from mdsl.codegen import onednn
from tests.golden.graphs import GRAPHS

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("MDSL_UPDATE_GOLDEN") == "1"


# graphs oneDNN could take on some machines (its probe decides), built without it
WITHOUT_ONEDNN = {"grouped_conv_relu"}


def _generated(name: str, monkeypatch) -> tuple[mdsl.Graph, object, str]:
    monkeypatch.chdir(ROOT)
    g = GRAPHS[name]()
    with onednn.disabled() if name in WITHOUT_ONEDNN else contextlib.nullcontext():
        exe = mdsl.compile(g, backend="c")
        [source] = exe.sources.values()
    return g, exe, source


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_generated_c_matches_the_golden_file(name, monkeypatch):
    _, _, source = _generated(name, monkeypatch)
    path = GOLDEN / f"{name}.c"
    if UPDATE:
        path.write_text(source, encoding="utf-8")
    assert path.is_file(), f"no golden file {path.name}; create it with MDSL_UPDATE_GOLDEN=1"
    _assert_same_text(path.read_text(encoding="utf-8"), source, f"golden/{name}.c")


def _assert_same_text(expected: str, generated: str, label: str) -> None:
    if generated != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                label,
                "generated",
            )
        )
        pytest.fail(f"generated C differs (MDSL_UPDATE_GOLDEN=1 regenerates):\n{diff}")


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_golden_graphs_compute_what_the_interpreter_does(name, monkeypatch):
    g, exe, _ = _generated(name, monkeypatch)
    [(input_name, t)] = g.inputs.items()
    x = np.random.default_rng(0).standard_normal(tuple(t.shape)).astype(np.float32)
    got, want = exe({input_name: x}), mdsl.interpret(g, {input_name: x})
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)


EXPECTED_KERNELS = {
    "pointwise_chain": [("pointwise", ["Mul", "Add", "Gelu", "Sigmoid", "Mul_1", "Add_1"])],
    "softmax": [("row reduction", ["Softmax"])],
    "layer_norm": [("row reduction", ["LayerNormalization"])],
    "matmul_bias_gelu": [("GEMM + epilogue", ["Gemm", "Gelu"])],  # MatMul+Add: Gemm
    "conv_relu": [("convolution (packed weights) + epilogue", ["Conv", "Relu"])],
    "grouped_conv_relu": [("convolution (packed weights) + epilogue", ["Conv", "Relu"])],
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_each_golden_graph_is_one_fused_kernel(name, monkeypatch):
    _, exe, source = _generated(name, monkeypatch)
    assert [(k.kind, list(k.nodes)) for k in exe.kernels] == EXPECTED_KERNELS[name]
    for node in EXPECTED_KERNELS[name][0][1]:  # the header names each node and its line
        assert f" *   {node} (" in source
    assert source.count("tests/golden/graphs.py:") == len(EXPECTED_KERNELS[name][0][1])


SPLIT = "matmul_bias_gelu"  # built as units (`render_units`) when a schedule is long


def test_the_units_of_a_split_build_match_the_golden_files(monkeypatch):
    from mdsl.targets.c import render

    exe = _generated(SPLIT, monkeypatch)[1]
    monkeypatch.setattr(render, "SPLIT_CALLS", 0)
    units = render.render_units(exe.plan, SPLIT)
    assert list(units) == [f"{SPLIT}.c", f"{SPLIT}_kernels1.c"]
    folder = GOLDEN / f"{SPLIT}.units"
    if UPDATE:
        folder.mkdir(exist_ok=True)
        for name, text in units.items():
            (folder / name).write_text(text, encoding="utf-8")
    assert sorted(p.name for p in folder.iterdir()) == sorted(units)
    for name, text in units.items():
        expected = (folder / name).read_text(encoding="utf-8")
        _assert_same_text(expected, text, f"golden/{SPLIT}.units/{name}")
