"""Every op of the table, run through the interpreter and checked against its reference."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

import mdsl
from tests.ops import op_table


def _all_cases():
    cases = []
    package = importlib.import_module("tests.ops")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("cases_"):
            cases += importlib.import_module(f"tests.ops.{info.name}").CASES
    return cases


CASES = _all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name() for c in CASES])
def test_op_case(case: op_table.OpCase):
    if case.raises is not None:
        with pytest.raises(case.raises):
            op_table.build_graph(case)
        return
    g = op_table.build_graph(case)
    mdsl.ir.verify(g)
    got = mdsl.interpret(g, case.inputs)
    want = op_table.expected_outputs(case)
    assert len(got) == len(want)
    for i, w in enumerate(want):
        y = got[f"y{i}"]
        assert y.shape == tuple(w.shape), f"output {i}: shape {y.shape} != {w.shape}"
        if np.issubdtype(w.dtype, np.floating) or w.dtype.name == "bfloat16":
            np.testing.assert_allclose(
                y.astype(np.float64), w.astype(np.float64), rtol=case.rtol, atol=case.atol
            )
        else:
            np.testing.assert_array_equal(y, w)


def test_table_covers_every_registered_op():
    structural = {"Input", "Const", "Output"}
    tested = {c.op for c in CASES}
    registered = {op for op, d in mdsl.ops.registry.all_ops().items() if d.category != "structural"}
    untested = sorted(registered - tested - structural - _USER_TEST_OPS)
    assert not untested, f"ops without a table case: {untested}"


# ops registered by tests themselves (custom-op tests), not part of the library
_USER_TEST_OPS = {"Double", "QLinearMatMul", "ScaledSilu"}
