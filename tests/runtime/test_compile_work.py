"""The work `mdsl.compile` and a first call do for a model, counted rather than timed
(docs/cpu-kernels.md, "Compile time"): each weight drawn once, no weight's bytes hashed
when the weights differ, one C function per distinct kernel however many layers repeat
it, and a symbolic build's first call compiles nothing. A regression in kind (a pass
that rehashes constants each round, layers rendered again) fails here on any machine."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mdsl
from examples import bert
from mdsl.codegen import toolchain
from mdsl.ir.initializer import ParamInit
from mdsl.passes import cse
from mdsl.targets.c.backend import plan_variant
from mdsl.targets.c.render import render_c


def _counting(monkeypatch, owner, name: str) -> list:
    calls: list = []
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_compile_and_first_calls_draw_each_weight_once_and_compile_nothing_more(monkeypatch):
    g = bert.bert(3, 32, 2)
    draws = _counting(monkeypatch, ParamInit, "_draw")
    exe = mdsl.compile(g, backend="c")
    compiles = _counting(monkeypatch, toolchain, "_build_entry")
    x = np.random.default_rng(0).standard_normal((2, 5, 32)).astype(np.float32)
    for batch, seq in ((2, 5), (1, 7), (2, 5)):
        y = exe(x=x[:batch, :1].repeat(seq, axis=1))["y"]
        np.testing.assert_allclose(y, mdsl.interpret(g, {"x": x[:batch, :1].repeat(seq, axis=1)})["y"],
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
    assert compiles == []  # the symbolic build serves every signature
    mdsl.compile(g, backend="c")  # again: the drawn values are kept with the graph
    assert compiles == []  # and the library is the cached one
    assert len(draws) == len({id(init) for (init,) in draws}) > 10


def test_cse_hashes_no_weight_whole_when_the_weights_differ(monkeypatch):
    g = bert.bert(3, 32, 2)
    for node in g.constants:  # weights already arrays, as an imported model has them
        value = node.attrs["value"]
        if isinstance(value, ParamInit) and value.kind == "normal":
            node.attrs["value"] = np.array(value.materialize())
    whole = _counting(monkeypatch, cse, "_full_key")
    mdsl.optimize(g, level=2)
    assert whole and all(np.size(value) <= 1024 for (value,) in whole)  # twins of a few values


@pytest.mark.parametrize("depth", [2, 6])
def test_repeated_layers_render_no_more_c_functions(depth):
    """A deeper model of the same layers defines as many kernel functions as a shallow one."""

    def functions(depth: int) -> int:
        plan = plan_variant(mdsl.optimize(bert.bert(depth, 32, 2), level=2), {})
        return len(re.findall(r"^static int k\w+\(", render_c(plan), re.M))

    assert functions(depth) == functions(3)
