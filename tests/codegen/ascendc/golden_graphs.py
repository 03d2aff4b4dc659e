"""The three graphs whose generated AscendC project is kept under tests/golden/ascendc/.

Their source lines appear in the golden files: edit this module only together with
regenerating them (`MDSL_UPDATE_GOLDEN=1 pytest tests/codegen/ascendc/test_golden.py`).
"""

from __future__ import annotations

import mdsl
from mdsl import ops


def golden_pointwise() -> mdsl.Graph:
    """float16 in and out: SiLU of a row-broadcast sum."""
    with mdsl.Graph("golden_pointwise") as g:
        x = g.input("x", (3, 50), "float16")
        b = g.input("b", (50,), "float16")
        g.output(ops.silu(x + b), "y")
    return g


def golden_softmax() -> mdsl.Graph:
    """A scaled softmax over rows of 50."""
    with mdsl.Graph("golden_softmax") as g:
        x = g.input("x", (4, 50))
        g.output(ops.softmax(x * 0.125, axis=-1), "y")
    return g


def golden_dense() -> mdsl.Graph:
    """A dense layer: matmul on the cube, bias and ReLU as its vector epilogue."""
    with mdsl.Graph("golden_dense") as g:
        x = g.input("x", (9, 20))
        w = mdsl.param("w", (20, 12))
        b = mdsl.param("b", (12,))
        g.output(ops.relu(x @ w + b), "y")
    return g


GOLDEN = ("golden_pointwise", "golden_softmax", "golden_dense")
