"""One-line declarations for the common op shapes (pointwise unary/binary, reductions).

Like JAX's `standard_primitive`: a shape rule and a dtype rule combined once, so an op
family member is a single line: `exp = unary_pointwise("Exp", np.exp)`.
"""

from __future__ import annotations

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import DTypeError
from mdsl.ir.format import Format
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.shape_rules import broadcast_shapes


def unary_pointwise(
    op_type: str,
    reference,
    dtypes="float",
    *,
    attrs=None,
    out_dtype=None,
    doc: str = "",
    cost: str = "arithmetic",
):
    """Declare an elementwise op of one input; `reference` is its numpy implementation;
    `cost="transcendental"` for an exp-like op (see `mdsl.passes.cost`)."""
    out_dtype = DType.of(out_dtype) if out_dtype is not None else None

    def infer(x, **_attrs):
        return TensorType(x.shape, out_dtype or x.dtype, x.format)

    infer.__name__ = op_type.lower()
    infer.__doc__ = doc or f"Elementwise {op_type} (ONNX semantics)."
    builder = op_proto(
        op_type,
        inputs={"x": dtypes},
        outputs={"y": [out_dtype] if out_dtype else dtypes},
        attrs=attrs or {},
        category="pointwise",
        cost=cost,
    )(infer)
    register_op_impl(op_type, _keep_dtype(reference, out_dtype))
    return builder


def binary_pointwise(
    op_type: str,
    reference,
    dtypes="numeric",
    *,
    out_dtype=None,
    doc: str = "",
    cost: str = "arithmetic",
):
    """Declare an elementwise op of two broadcasting inputs of one dtype."""
    out_dtype = DType.of(out_dtype) if out_dtype is not None else None

    def infer(a, b):
        same_dtype(op_type, a, b)
        fmt = a.format if a.format == b.format or b.rank < a.rank else b.format
        return TensorType(broadcast_shapes(a.shape, b.shape), out_dtype or a.dtype, _nd(fmt))

    infer.__name__ = op_type.lower()
    infer.__doc__ = doc or f"Elementwise {op_type} with numpy broadcasting (ONNX semantics)."
    builder = op_proto(
        op_type,
        inputs={"a": dtypes, "b": dtypes},
        outputs={"y": [out_dtype] if out_dtype else dtypes},
        category="pointwise",
        cost=cost,
    )(infer)
    register_op_impl(op_type, _keep_dtype(reference, out_dtype))
    return builder


def same_dtype(op_type: str, *types: TensorType) -> None:
    """DTypeError unless every given (non-None) type has the first one's dtype."""
    present = [t for t in types if t is not None]
    for t in present[1:]:
        if t.dtype != present[0].dtype:
            raise DTypeError(
                f"inputs of {op_type} must share a dtype, got {present[0].dtype} and {t.dtype}; "
                "cast one with .astype(...)"
            )


def _nd(fmt: Format) -> Format:
    return fmt if fmt in (Format.ND, Format.NCHW, Format.NHWC) else Format.ND


def _keep_dtype(reference, out_dtype):
    """Wrap a numpy reference so results keep the input dtype (numpy may promote)."""

    def run(*arrays, **attrs):
        result = np.asarray(reference(*arrays, **attrs))
        target = out_dtype.np if out_dtype is not None else arrays[0].dtype
        if result.dtype != target:
            result = result.astype(target)
        return result

    run.__name__ = getattr(reference, "__name__", "reference")
    run.__wrapped__ = reference
    return run
