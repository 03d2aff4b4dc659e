"""One typing walk for every target: the C and numba renderers report the dtype the
shared walk (`mdsl.codegen.expr_types`) gives, which is the interpreter's (numpy's), and
the compiled code computes in it."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

import mdsl
from mdsl import expr as E
from mdsl.codegen.expr_types import ExprTypes
from mdsl.ir.dtype import DType
from mdsl.targets.c.expr import CExprRenderer
from mdsl.targets.numba import support
from mdsl.targets.numba.expr import NumbaExprRenderer
from tests.op_sandbox import restored_registries

VARS = {"i": DType.int32, "b": DType.int8, "w": DType.int64, "x": DType.float32, "d": DType.float64}
i, b, w, x, d = (E.var(n) for n in VARS)
MIXED = [
    i * 0.5,  # an integer meeting a float constant: float64
    i + 2.0,
    i + 2,  # an integer constant adapts
    b + i,
    w * 3,
    x * 1.5,  # float32 stays float32
    x + i,
    d + x,
    i / 2,  # integer division stays integer
    E.exp(i),  # a float function of an integer: float64
    E.sigmoid(w),
    E.sqrt(x),
    E.abs(i),
    E.floor(b),
    E.max(i, 0.5),
    E.min(b, 3),
    E.select(i > 0, i, 0.5),
    E.select(x > 0, 1, 0),
    -i,
    i < 1.5,
    E.cast(x, "int16") + 1,
]
# numpy's array rules differ where graphs never lead: float32 + int32 is float64 there
# (mdsl computes mixed operands in the wider mdsl type, as C does) and constants only
# have no dtype in a context that does not want one
NOT_NUMPY = {str(x + i), str(E.select(x > 0, 1, 0))}
ARRAYS = {name: np.arange(1, 4).astype(t.np) for name, t in VARS.items()}


@pytest.mark.parametrize("e", MIXED, ids=str)
def test_every_target_agrees_with_the_interpreter_on_the_result_dtype(e):
    shared = ExprTypes(VARS).of(e)
    assert CExprRenderer(dict(VARS)).type_of(e) == shared
    assert NumbaExprRenderer(dict(VARS)).type_of(e) == shared
    if str(e) not in NOT_NUMPY:
        assert E.evaluate(e, ARRAYS).dtype == shared.np  # the interpreter's numpy rules


@pytest.mark.parametrize("e", MIXED, ids=str)
def test_the_numba_text_computes_in_the_reported_dtype(e):
    """The text converts every operand itself, so numpy scalars run it with the types
    numba infers: its value has the reported dtype."""
    text = NumbaExprRenderer(dict(VARS)).render(e)
    scalars = {name: a[1] for name, a in ARRAYS.items()}
    value = eval(text, {"np": np, "math": math, "rt": support}, scalars)
    assert np.asarray(value).dtype == ExprTypes(VARS).of(e).np


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_an_integer_times_a_fraction_computes_in_double_in_c_as_in_the_interpreter():
    """2**24 + 1 is not a float32: a C kernel computing int32 * 0.5 in float would
    print 8388608.0 where the interpreter has 8388608.5."""
    with restored_registries():

        @mdsl.op_proto("HalfOf", inputs={"x": ["int32"]}, outputs={"y": ["float64"]})
        def half_of(x):
            return mdsl.TensorType(x.shape, "float64")

        mdsl.register_op_impl("HalfOf", lambda v: v * 0.5 + 0.25, backend="expr")
        with mdsl.Graph("half_of") as g:
            g.output(half_of(g.input("x", (4,), "int32")), "y")
        feeds = {"x": np.array([2**24 + 1, -(2**24) - 3, 7, 0], np.int32)}
        want = mdsl.interpret(g, feeds)["y"]
        exe = mdsl.compile(g, backend="c")
        assert [k.kind for k in exe.kernels] == ["pointwise"]
        np.testing.assert_array_equal(exe(**feeds)["y"], want)
        assert want[0] == 8388608.75
