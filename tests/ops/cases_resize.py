"""Cases for Resize: against torch.nn.functional.interpolate for the modes torch has, and
against onnxruntime (an independent ONNX implementation) for the others.

Tolerances: nearest is exact; linear and cubic are weighted sums, rtol/atol 1e-5 in float32.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import torch.nn.functional as F
from onnx import TensorProto, helper

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

X = rand(2, 3, 4, 5)
SMOOTH = {"rtol": 1e-5, "atol": 1e-5}


def onnxruntime_resize(x: np.ndarray, *, scales=None, sizes=None, axes=None, **attrs):
    """Run one ONNX Resize node (opset 19) in onnxruntime."""
    dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
    inits, names = [], ["x", ""]
    if scales is not None:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [len(scales)], scales))
        names += ["scales"]
    else:
        inits.append(helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], sizes))
        names += ["", "sizes"]
    if axes is not None:
        attrs["axes"] = list(axes)
    node = helper.make_node("Resize", names, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("x", dtype, list(x.shape))],
        [helper.make_tensor_value_info("y", dtype, [None] * x.ndim)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"x": x})[0]


def _ort_case(case_id, x, build_attrs, **extra):
    return OpCase(
        "Resize",
        lambda a: ops.resize(a, **build_attrs),
        {"x": x},
        numpy_ref=lambda a: onnxruntime_resize(a, **build_attrs),
        id=case_id,
        **extra,
    )


TORCH = [
    OpCase(
        "Resize",
        lambda a: ops.resize(
            a,
            scales=(1, 1, 2, 2),
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        {"x": X},
        lambda a: F.interpolate(a, scale_factor=2, mode="nearest"),
        id="nearest-up",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(
            a,
            scales=(1, 1, 0.5, 0.5),
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        {"x": rand(1, 2, 8, 6, dtype="uint8", lo=0, hi=255)},
        lambda a: F.interpolate(a, scale_factor=0.5, mode="nearest"),
        id="nearest-down-uint8",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(1, 1, 1.5, 2.5), nearest_mode="round_prefer_ceil"),
        {"x": X},
        lambda a: F.interpolate(a, scale_factor=(1.5, 2.5), mode="nearest-exact"),
        id="nearest-exact",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(
            a,
            sizes=(7, 3),
            axes=(2, 3),
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        {"x": X},
        lambda a: F.interpolate(a, size=(7, 3), mode="nearest"),
        id="nearest-sizes-axes",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(1, 1, 2, 2), mode="linear"),
        {"x": X},
        lambda a: F.interpolate(a, scale_factor=2, mode="bilinear", align_corners=False),
        id="bilinear-half-pixel",
        **SMOOTH,
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(
            a,
            scales=(1, 1, 0.5, 0.6),
            mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
        {"x": rand(1, 2, 8, 10)},
        lambda a: F.interpolate(a, scale_factor=(0.5, 0.6), mode="bilinear", align_corners=False),
        id="bilinear-down",
        **SMOOTH,
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(
            a, sizes=(2, 3, 7, 9), mode="linear", coordinate_transformation_mode="align_corners"
        ),
        {"x": X},
        lambda a: F.interpolate(a, size=(7, 9), mode="bilinear", align_corners=True),
        id="bilinear-align-corners",
        **SMOOTH,
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, sizes=(2, 3, 6, 9), mode="cubic"),
        {"x": X},
        lambda a: F.interpolate(a, size=(6, 9), mode="bicubic", align_corners=False),
        id="bicubic",
        **SMOOTH,
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(
            a, scales=(1, 1, 2, 3), mode="cubic", coordinate_transformation_mode="align_corners"
        ),
        {"x": X},
        lambda a: F.interpolate(a, scale_factor=(2, 3), mode="bicubic", align_corners=True),
        id="bicubic-align-corners",
        **SMOOTH,
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(3,), axes=(-1,), mode="linear"),
        {"x": rand(2, 3, 5)},
        lambda a: F.interpolate(a, scale_factor=3, mode="linear", align_corners=False),
        id="linear-1d",
        **SMOOTH,
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, sizes=(4, 5, 3), axes=(2, 3, 4), mode="linear"),
        {"x": rand(1, 2, 3, 4, 2, dtype="float64")},
        lambda a: F.interpolate(a, size=(4, 5, 3), mode="trilinear", align_corners=False),
        id="trilinear-float64",
        rtol=1e-12,
        atol=1e-12,
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(1, 1, 2, 2), mode="linear"),
        {"x": X},
        lambda a: F.interpolate(a, scale_factor=2, mode="bilinear", align_corners=False),
        symbolic={"x": ("N", 3, "H", "W")},
        id="symbolic",
        **SMOOTH,
    ),
]

ORT = [
    _ort_case("nearest-default", X, {"scales": (1, 1, 1.5, 0.6)}),
    _ort_case(
        "nearest-ceil-align-corners",
        X,
        {
            "sizes": (2, 3, 7, 3),
            "nearest_mode": "ceil",
            "coordinate_transformation_mode": "align_corners",
        },
    ),
    _ort_case(
        "linear-asymmetric",
        X,
        {
            "scales": (1, 1, 1.5, 2.0),
            "mode": "linear",
            "coordinate_transformation_mode": "asymmetric",
        },
        **SMOOTH,
    ),
    _ort_case(
        "linear-half-pixel-symmetric",
        X,
        {
            "scales": (1, 1, 1.7, 0.7),
            "mode": "linear",
            "coordinate_transformation_mode": "half_pixel_symmetric",
        },
        **SMOOTH,
    ),
    _ort_case(
        "linear-pytorch-half-pixel-to-1",
        X,
        {
            "sizes": (1, 4),
            "axes": (2, 3),
            "mode": "linear",
            "coordinate_transformation_mode": "pytorch_half_pixel",
        },
        **SMOOTH,
    ),
    _ort_case(
        "cubic-exclude-outside",
        X,
        {"scales": (1, 1, 2, 1.5), "mode": "cubic", "exclude_outside": True, "cubic_coeff_a": -0.5},
        **SMOOTH,
    ),
    _ort_case(
        "nearest-int32", rand(1, 1, 3, 4, dtype="int32", lo=-50, hi=50), {"scales": (1, 1, 2, 1.5)}
    ),
]

ERRORS = [
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(1, 1, 2, 2), mode="linear"),
        {"x": rand(1, 1, 2, 2, dtype="int32")},
        raises=mdsl.DTypeError,
        id="linear-int",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(1, 1, 2, 2), sizes=(1, 1, 4, 4)),
        {"x": X},
        raises=mdsl.ShapeError,
        id="scales-and-sizes",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(2, 2)),
        {"x": X},
        raises=mdsl.ShapeError,
        id="scales-wrong-length",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(1, 1, 0.3, 1)),
        {"x": X},
        symbolic={"x": (2, 3, "H", 5)},
        raises=mdsl.ShapeError,
        id="odd-scale-of-symbolic-dim",
    ),
    OpCase(
        "Resize",
        lambda a: ops.resize(a, scales=(1, 1, 2, 2), mode="area"),
        {"x": X},
        raises=mdsl.GraphError,
        id="unknown-mode",
    ),
]

CASES = TORCH + ORT + ERRORS
