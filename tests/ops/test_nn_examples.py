"""Every builder of the activation, elementwise-math and nn families is exported by
`mdsl.ops` and documents itself with a runnable example (tests/test_docstrings.py runs
the examples; this checks none is missing)."""

from __future__ import annotations

import pytest

import mdsl
from mdsl.ops import activation, elementwise, nn

BUILDERS = {
    activation: "elu gelu hard_sigmoid hard_swish leaky_relu prelu sigmoid silu softplus",
    elementwise: "ceil clip cos erf floor is_nan logical_and logical_not logical_or logical_xor "
    "maximum minimum mod reciprocal round rsqrt sign sin where",
    nn: "average_pool batch_norm conv conv2d dequantize_linear dropout gemm global_average_pool "
    "global_max_pool group_norm instance_norm layer_norm linear log_softmax max_pool "
    "quantize_linear softmax",
}
NAMES = [(module, name) for module, names in BUILDERS.items() for name in names.split()]


@pytest.mark.parametrize(("module", "name"), NAMES, ids=[n for _, n in NAMES])
def test_builder_is_exported_with_an_example(module, name):
    builder = getattr(module, name)
    exported = getattr(mdsl.ops, name)
    assert exported is builder or exported.__wrapped__ is builder  # with device= added
    assert ">>> import" in (builder.__doc__ or ""), f"{name} has no runnable example"
