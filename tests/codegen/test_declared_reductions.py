"""A reduction op declares what it reduces and its row rule where it is defined
(`op_proto(..., reduction=Reduction(...))`); fusion and the row kernels read them, so an
op declared in a test file fuses and compiles like the built-in ones."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import mdsl
from mdsl import expr as E
from mdsl.ops.reductions import Reduction, mean, reduce_rule
from mdsl.passes.fusion import fusion_groups, reduction_space
from tests.op_sandbox import restored_registries


def _middle_axis(attrs, rank):
    return (1,)  # no `axes`/`axis` attr: only the declaration says what is reduced


@pytest.fixture
def middle_mean():
    with restored_registries():

        @mdsl.op_proto(
            "MiddleMean",
            inputs={"x": ["float32"]},
            outputs={"y": ["float32"]},
            category="reduction",
            reduction=Reduction(_middle_axis, reduce_rule("sum", pre=E.abs, post=mean)),
        )
        def middle_mean(x):
            return mdsl.TensorType((x.shape[0], 1, *x.shape[2:]), x.dtype)

        mdsl.register_op_impl(
            "MiddleMean", lambda x: np.abs(x).mean(axis=1, keepdims=True).astype(x.dtype)
        )
        yield middle_mean


def _graph(middle_mean):
    with mdsl.Graph("declared") as g:
        x = g.input("x", (4, 6, 5))
        g.output(mdsl.ops.exp(middle_mean(x * 2.0)) + 1.0, "y")
    return g


def test_fusion_reads_the_axes_the_op_declares(middle_mean):
    g = mdsl.passes.run(_graph(middle_mean), ["fuse"])
    node = next(n for n in g if n.op_type == "MiddleMean")
    assert reduction_space(node) == ((4, 6, 5), (1,))
    [group] = fusion_groups(g)
    assert group.kind == "reduction" and [n.op_type for n in group.nodes] == [
        "Mul",
        "MiddleMean",
        "Exp",
        "Add",
    ]


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_the_row_rule_the_op_declares_compiles_to_one_row_kernel(middle_mean):
    g = _graph(middle_mean)
    x = np.random.default_rng(0).standard_normal((4, 6, 5)).astype(np.float32)
    exe = mdsl.compile(g, backend="c")
    assert [k.kind for k in exe.kernels] == ["row reduction"]
    np.testing.assert_allclose(exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-6)
