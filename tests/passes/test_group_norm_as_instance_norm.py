"""group_norm_as_instance_norm: GroupNormalization compiles to a row kernel (no callback),
equal to PyTorch's group_norm, with a symbolic batch too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mdsl
from mdsl import ops

RNG = np.random.default_rng(11)


@pytest.mark.parametrize(
    ("shape", "groups"), [((2, 8, 5, 6), 4), ((3, 6, 10), 3), ((1, 4, 2, 3, 3), 1)]
)
def test_group_norm_compiles_and_equals_torch(shape, groups):
    x = RNG.standard_normal(shape).astype(np.float32) * 3 + 1
    scale, bias = (RNG.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
    with mdsl.Graph("gn") as g:
        xt = g.input("x", ("N", *shape[1:]))
        y = ops.group_norm(
            xt, g.const("s", scale), g.const("b", bias), num_groups=groups, epsilon=1e-5
        )
        g.output(y, "y")
    assert "GroupNormalization" not in {n.op_type for n in mdsl.optimize(g)}
    exe = mdsl.compile(g, backend="c")
    got = exe(x=x)["y"]
    assert not exe.plan.fallbacks
    want = F.group_norm(
        torch.from_numpy(x), groups, torch.from_numpy(scale), torch.from_numpy(bias), 1e-5
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
