"""Property: at every optimization level, the optimized graph computes what the original
does, on random graphs and random feeds (derandomized: the same graphs on every run)."""

from __future__ import annotations

from hypothesis import given, settings

import mdsl
from tests.passes.random_graphs import (
    FAMILIES,
    PROFILE,
    GraphConfig,
    assert_same_outputs,
    random_graphs,
)

EXAMPLES_PER_TEST = 110  # three tests: 330 graphs, each checked at levels 0..3


def _structure(g: mdsl.Graph) -> list:
    return [(n.name, n.op_type, [None if t is None else t.name for t in n.inputs]) for n in g]


def check_all_levels(rg) -> None:
    want = mdsl.interpret(rg.graph, rg.feeds)
    before = _structure(rg.graph)
    for level in range(4):
        optimized = mdsl.optimize(rg.graph, level=level)
        got = mdsl.interpret(optimized, rg.feeds)
        assert_same_outputs(got, want, rtol=1e-4, atol=1e-5, what=f"level {level} {rg}")
        assert len(optimized) <= len(rg.graph) or level >= 3
    assert _structure(rg.graph) == before, "mdsl.optimize mutated its argument"


@settings(PROFILE, max_examples=EXAMPLES_PER_TEST)
@given(random_graphs(GraphConfig(symbolic=True)))
def test_optimize_preserves_results_symbolic(rg):
    check_all_levels(rg)


@settings(PROFILE, max_examples=EXAMPLES_PER_TEST)
@given(random_graphs(GraphConfig(symbolic=False, max_steps=16)))
def test_optimize_preserves_results_static(rg):
    check_all_levels(rg)


@settings(PROFILE, max_examples=EXAMPLES_PER_TEST)
@given(
    random_graphs(
        GraphConfig(
            families=tuple(f for f in FAMILIES if f not in ("reduce", "shape")) + ("neutral",) * 3,
            dtypes=("float32", "float64", "float16"),
        )
    )
)
def test_optimize_preserves_results_rewrite_heavy(rg):
    check_all_levels(rg)
