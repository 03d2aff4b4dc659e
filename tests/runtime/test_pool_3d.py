"""3-D pooling is generated code in C and numba (no Python callback), equal to PyTorch:
max and average, strides, pads, dilations, ceil_mode and count_include_pad."""

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
