"""Cases for the control-flow ops: If (mdsl.cond), Case (mdsl.switch), While
(mdsl.while_loop), checked against plain Python control flow over PyTorch tensors."""

from __future__ import annotations

import numpy as np
import torch

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

POS, NEG = rand(3, 4, lo=0.1, hi=2.0), rand(3, 4, lo=-2.0, hi=-0.1)


def _if(x):
    return mdsl.cond(x.sum() > 0.0, lambda: x * 2.0, lambda: ops.exp(x))


def _if_ref(x):
    return x * 2.0 if x.sum() > 0 else torch.exp(x)


def _if_two_results(x, y):
    return mdsl.cond(
        x.max() > y.max(), lambda: (x - y, x.sum(axis=0)), lambda: (y - x, y.sum(axis=0))
    )


def _if_two_results_ref(x, y):
    return (x - y, x.sum(0)) if x.max() > y.max() else (y - x, y.sum(0))


def _if_dynamic(x):
    """A branch keeping the rows, one dropping the first: the result's rows are "R"."""
    return mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x[1:] * 3.0, shapes=("R", 4))


def _case(x, k):
    return mdsl.switch(k, [lambda: x + 1.0, lambda: x * x, lambda: ops.tanh(x)])


def _case_ref(x, k):
    return [x + 1.0, x * x, torch.tanh(x)][int(k)]


def _while(x, n):
    return mdsl.while_loop(lambda i, acc: i < n, lambda i, acc: (i + 1, acc * 0.5 + x), (0, x))


def _while_ref(x, n):
    i, acc = 0, x
    while i < int(n):
        i, acc = i + 1, acc * 0.5 + x
    return torch.tensor(i), acc


def _while_growing(row, n):
    """Rows appended until there are n of them: a loop-carried dim "L" that changes."""
    return mdsl.while_loop(
        lambda acc: ops.size(acc) < n * 3,
        lambda acc: ops.concat([acc, row * 2.0], axis=0),
        np.zeros((0, 3), np.float32),  # the initial value: a constant with no rows
        shapes=(mdsl.Dim("L", max=16), 3),
    )


def _while_growing_ref(row, n):
    return torch.cat([row * 2.0] * int(n), dim=0)


def _int(value, dtype="int64"):
    return np.array(value, dtype=dtype)


CASES = [
    OpCase("If", _if, {"x": POS}, _if_ref, id="then"),
    OpCase("If", _if, {"x": NEG}, _if_ref, id="else"),
    OpCase("If", _if_two_results, {"x": POS, "y": NEG}, _if_two_results_ref, id="two-results"),
    OpCase("If", _if_two_results, {"x": NEG, "y": POS}, _if_two_results_ref, id="two-results-else"),
    OpCase(
        "If",
        _if_dynamic,
        {"x": NEG},
        lambda x: x[1:] * 3.0,
        symbolic={"x": ("N", 4)},
        id="dynamic-rows",
    ),
    OpCase(
        "If",
        lambda x: mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x.astype("float16")),
        {"x": POS},
        raises=mdsl.DTypeError,
        id="dtype-mismatch",
    ),
    OpCase(
        "If",
        lambda x: mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x[1:]),
        {"x": POS},
        raises=mdsl.ShapeError,
        id="shape-mismatch",
    ),
    OpCase(
        "If",
        lambda x: mdsl.cond(x > 0.0, lambda: x, lambda: -x),
        {"x": POS},
        raises=mdsl.ShapeError,
        id="pred-not-one-element",
    ),
    OpCase("Case", _case, {"x": POS, "k": _int(0)}, _case_ref, id="0"),
    OpCase("Case", _case, {"x": NEG, "k": _int(2, "int32")}, _case_ref, id="2-int32"),
    OpCase(
        "Case",
        lambda x, k: mdsl.switch(k, [lambda: x, lambda: -x]),
        {"x": POS, "k": rand(1)},
        raises=mdsl.DTypeError,
        id="float-index",
    ),
    OpCase("While", _while, {"x": POS, "n": _int(4)}, _while_ref, id="four"),
    OpCase("While", _while, {"x": POS, "n": _int(0)}, _while_ref, id="zero-iterations"),
    OpCase(
        "While",
        _while_growing,
        {"row": rand(1, 3), "n": _int(5)},
        _while_growing_ref,
        id="growing-dim",
    ),
    OpCase(
        "While",
        lambda x: mdsl.while_loop(lambda a: a.sum() < 10.0, lambda a: ops.concat([a, a], 0), x),
        {"x": POS},
        raises=mdsl.ShapeError,
        id="undeclared-growth",
    ),
]
