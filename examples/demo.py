"""The flagship demo: build a nested-layer model, inspect it, run it, check it.

Run with `make demo` (or `python examples/demo.py` inside the project's venv).
"""

from __future__ import annotations

import time

import numpy as np

import mdsl
from mdsl import ops


@mdsl.layer
def ffn(x, hidden):
    w1 = mdsl.param("w1", (x.shape[-1], hidden))
    w2 = mdsl.param("w2", (hidden, x.shape[-1]))
    return ops.relu(x @ w1) @ w2 + x


@mdsl.layer(name="Block")
def block(x):
    return ffn(ffn(x, 64), 64)


def build() -> mdsl.Graph:
    with mdsl.Graph("demo_mlp") as g:
        x = g.input("x", ("N", 16))
        g.output(block(x), "y")
    return g


def main() -> None:
    start = time.perf_counter()
    g = build()
    print(f"built {g.name} in {1e3 * (time.perf_counter() - start):.1f} ms\n")
    print(g.summary())
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)}
    y = mdsl.interpret(g, feeds)["y"]
    print(f"interpreted: y{list(y.shape)}, mean {y.mean():+.4f}")


if __name__ == "__main__":
    main()
