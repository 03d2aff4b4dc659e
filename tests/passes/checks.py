"""Shared checks for pass tests: op listings, feeds, before/after result equality, and a
region op carrying a control-flow subgraph (for recursion tests)."""

from __future__ import annotations

import numpy as np

import mdsl
from tests.passes.random_graphs import assert_same_outputs


def op_types(g: mdsl.Graph) -> list[str]:
    return [n.op_type for n in g]


def count(g: mdsl.Graph, op_type: str) -> int:
    return sum(n.op_type == op_type for n in g)


def random_feeds(g: mdsl.Graph, symbols: dict | None = None, seed: int = 0) -> dict:
    symbols = {"N": 3, **(symbols or {})}
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, t in g.inputs.items():
        shape = [d if isinstance(d, int) else d.evaluate(symbols) for d in t.shape]
        if t.dtype.is_float:
            feeds[name] = rng.uniform(-2, 2, size=shape).astype(t.dtype.np)
        else:
            feeds[name] = rng.integers(-3, 4, size=shape).astype(t.dtype.np)
    return feeds


def assert_preserves_results(before: mdsl.Graph, after: mdsl.Graph, *, rtol=1e-5, atol=1e-6):
    """`after` computes the same outputs as `before` (interpreter, random feeds)."""
    feeds = random_feeds(before)
    assert_same_outputs(
        mdsl.interpret(after, feeds), mdsl.interpret(before, feeds), rtol=rtol, atol=atol
    )


def add_region(outer: mdsl.Graph, x: mdsl.Tensor, build_body) -> mdsl.Tensor:
    """Inside `with outer:`, record a `TestRegion` node over `x` whose subgraph "body" is
    built by `build_body(x)` (a closure over outer tensors, like mdsl.cond's branches);
    returns the node's output. Register the op with `region_op()` first."""
    body = mdsl.Graph("body")
    body.parent = outer
    with body:
        body.output(build_body(x), "out")
    y = _test_region(x)
    y.producer.subgraphs = {"body": body}
    return y


def region_op():
    """Register `TestRegion` (x -> x's type; a structural stand-in for If/Loop)."""
    global _test_region

    @mdsl.op_proto("TestRegion", inputs={"x": "any"}, outputs={"y": "any"})
    def _region(x):
        return x

    _test_region = _region
    return _region


_test_region = None
