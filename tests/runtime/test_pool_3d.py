"""3-D pooling is generated code in C and numba (no Python callback), equal to PyTorch:
max and average, strides, pads, dilations, ceil_mode and count_include_pad. 2-D pooling
on C pools a row of outputs at once (windows cut by the padding at its ends, none whole
in a narrow row): equal to PyTorch too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops

X = np.random.default_rng(3).standard_normal((2, 3, 7, 9, 8)).astype(np.float32)

CASES = {
    "max": (
        lambda x: ops.max_pool(x, (2, 3, 2), strides=(2, 1, 2)),
        lambda x: F.max_pool3d(x, (2, 3, 2), (2, 1, 2)),
    ),
    "max-pads-dilations-ceil": (
        lambda x: ops.max_pool(
            x, 3, strides=2, pads=(1, 0, 1, 1, 1, 1), dilations=(1, 2, 1), ceil_mode=True
        ),
        lambda x: F.max_pool3d(
            F.pad(x, (1, 1, 0, 1, 1, 1), value=-np.inf), 3, 2, dilation=(1, 2, 1), ceil_mode=True
        ),
    ),
    "avg-exclude-pad": (
        lambda x: ops.average_pool(x, 3, strides=2, pads=(1,) * 6),
        lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False),
    ),
    "avg-include-pad": (
        lambda x: ops.average_pool(x, (3, 2, 3), pads=(1,) * 6, count_include_pad=True),
        lambda x: F.avg_pool3d(x, (3, 2, 3), 1, 1, count_include_pad=True),
    ),
}


@pytest.mark.parametrize("backend", ["c", "numba"])
@pytest.mark.parametrize("case", list(CASES))
def test_3d_pooling_is_generated_and_equals_torch(case, backend):
    build, reference = CASES[case]
    with mdsl.Graph("pool3d") as g:
        g.output(build(g.input("x", X.shape)), "y")
    exe = mdsl.compile(g, backend=backend)
    assert not exe.plan.fallbacks
    assert {k.kind for k in exe.kernels} == {"pooling"}
    want = reference(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(exe(x=X)["y"], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(mdsl.interpret(g, {"x": X})["y"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 3, 11, 9), (1, 2, 5, 7, 6)])
def test_max_pooling_keeps_nan_and_infinities_on_c(shape):
    """The C max pool compares without a branch and remembers a NaN apart: a window
    holding a NaN gives NaN, one of -inf only gives -inf (as the interpreter and torch)."""
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::13] = np.nan
    x.reshape(-1)[5::17] = -np.inf
    x.reshape(-1)[7::29] = np.inf
    rank = len(shape) - 2
    with mdsl.Graph("pool_nan") as g:
        g.output(ops.max_pool(g.input("x", shape), 3, strides=2, pads=(1,) * 2 * rank), "y")
    exe = mdsl.compile(g, backend="c")
    assert {k.kind for k in exe.kernels} == {"pooling"}
    got, want = exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"]
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(got, want)
    pool = F.max_pool2d if rank == 2 else F.max_pool3d
    np.testing.assert_array_equal(got, pool(torch.from_numpy(x), 3, 2, 1).numpy())


X2 = np.random.default_rng(5).standard_normal((2, 3, 11, 13)).astype(np.float32)

CASES_2D = {
    "max-s2-p1": (
        lambda x: ops.max_pool(x, 3, strides=2, pads=1),
        lambda x: F.max_pool2d(x, 3, 2, 1),
    ),
    "max-dilated-ceil": (
        lambda x: ops.max_pool(x, (2, 3), strides=2, pads=1, dilations=2, ceil_mode=True),
        lambda x: F.max_pool2d(x, (2, 3), 2, 1, dilation=2, ceil_mode=True),
    ),
    "max-no-whole-window": (  # 7 wide windows on 13 columns, padded 3: every one cut
        lambda x: ops.max_pool(x, 7, strides=4, pads=3),
        lambda x: F.max_pool2d(x, 7, 4, 3),
    ),
    "avg-exclude-pad-ceil": (
        lambda x: ops.average_pool(x, 3, strides=2, pads=1, ceil_mode=True),
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    ),
    "avg-include-pad": (
        lambda x: ops.average_pool(x, 5, pads=2, count_include_pad=True),
        lambda x: F.avg_pool2d(x, 5, 1, 2, count_include_pad=True),
    ),
}


@pytest.mark.parametrize("case", list(CASES_2D))
def test_2d_pooling_by_rows_equals_torch(case):
    build, reference = CASES_2D[case]
    with mdsl.Graph("pool2d") as g:
        g.output(build(g.input("x", X2.shape)), "y")
    exe = mdsl.compile(g, backend="c")
    assert {k.kind for k in exe.kernels} == {"pooling"}
    want = reference(torch.from_numpy(X2)).numpy()
    np.testing.assert_allclose(exe(x=X2)["y"], want, rtol=1e-6, atol=1e-6)
