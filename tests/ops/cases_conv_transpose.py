"""Cases for ConvTranspose against torch.nn.functional.conv_transpose1d/2d/3d (float32,
rtol/atol 1e-5): strides, pads, dilations, groups, output_padding, bias."""

from __future__ import annotations

import torch.nn.functional as F

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

TOL = {"rtol": 1e-5, "atol": 1e-5}
_TORCH = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _case(
    case_id,
    x_shape,
    w_shape,
    *,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    output_padding=0,
    bias=True,
):
    n = len(x_shape) - 2
    inputs = {"x": rand(*x_shape), "w": rand(*w_shape, seed=1)}
    if bias:
        inputs["b"] = rand(w_shape[1] * groups, seed=2)

    def build(x, w, b=None):
        return ops.conv_transpose(
            x,
            w,
            b,
            strides=(stride,) * n,
            pads=(padding,) * 2 * n,
            dilations=(dilation,) * n,
            group=groups,
            output_padding=(output_padding,) * n,
        )

    def ref(x, w, b=None):
        return _TORCH[n](
            x,
            w,
            b,
            stride=stride,
            padding=padding,
            output_padding=output_padding,
            groups=groups,
            dilation=dilation,
        )

    return OpCase("ConvTranspose", build, inputs, ref, id=case_id, **TOL)


CASES = [
    _case("1d", (2, 3, 7), (3, 4, 3), stride=2, padding=1),
    _case("2d-output-padding", (1, 4, 5, 5), (4, 2, 3, 3), stride=2, padding=1, output_padding=1),
    _case("2d-groups-dilation", (2, 4, 4, 6), (4, 3, 2, 3), groups=2, dilation=2, bias=False),
    _case("3d", (1, 2, 3, 4, 3), (2, 3, 2, 2, 2), stride=(2), padding=0),
    OpCase("ConvTranspose", lambda x, w: ops.conv_transpose(x, w),
           {"x": rand(1, 3, 5, 5), "w": rand(4, 2, 3, 3)}, raises=mdsl.ShapeError,
           id="channel-mismatch"),
    OpCase("ConvTranspose", lambda x, w: ops.conv_transpose(x, w, strides=(2,), output_padding=(2,)),
           {"x": rand(1, 3, 5), "w": rand(3, 2, 3)}, raises=mdsl.ShapeError,
           id="output-padding-too-large"),
]  # fmt: skip
