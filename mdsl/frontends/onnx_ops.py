"""The ONNX <-> mdsl op table: one entry per op that maps one to one, read both ways.

mdsl op types are ONNX names with ONNX semantics, so most ops need nothing but their
name. What does differ is recorded here, once, for the importer and the exporter:

- `AttrInput`: where ONNX passes a compile-time parameter as a tensor input (Reshape's
  shape, Slice's starts/ends/axes/steps, Pad's pads, ReduceX's axes, ...), mdsl holds it
  as an attribute. Each entry names the mdsl attribute, the ONNX input position and the
  first opset in which ONNX made it an input (before that it was an ONNX attribute).
- `ignored`: ONNX attributes mdsl has no counterpart for, accepted only at the value
  that makes them irrelevant (`ANY`: irrelevant whatever their value).
- `extra_outputs`: optional ONNX outputs mdsl does not produce (MaxPool's Indices,
  LayerNormalization's Mean and InvStdDev, ...): a model that uses them is refused.
- `since`: the first opset with the semantics mdsl implements (the exporter refuses to
  write the op for an older target opset).

Ops that need more than this (version adapters such as Softmax before opset 13, and
ONNX ops mdsl spells as several ops, such as Sum or LRN) have import rules in
`mdsl.frontends.onnx_rules`; ops mdsl has and ONNX lacks (Rsqrt, Silu) have export rules
in `mdsl.frontends.onnx_export`.

>>> MAPPINGS["Reshape"].attr_inputs
(AttrInput(attr='shape', index=1, since=5, encoding='int64s', onnx_attr=None),)
>>> MAPPINGS["ReduceMean"].attr_inputs[0].since
18
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsl.ir.dtype import DType

ONNX_DOMAINS = ("", "ai.onnx")
MDSL_DOMAIN = "ai.mdsl"  # ops mdsl has and ONNX lacks, and user ops declared with op_proto
OLDEST_OPSET = 9
ANY = object()  # an ignored attribute accepted whatever its value


@dataclass(frozen=True, slots=True)
class AttrInput:
    """mdsl attribute `attr` is ONNX input `index` from opset `since` on (before that,
    ONNX attribute `onnx_attr`, by default of the same name).

    `encoding` says how the exporter writes the value as an initializer: "int64s" (1-D
    int64), "int64" (0-d int64), "float" (0-d float32), "like_data" (0-d of input 0's
    dtype).
    """

    attr: str
    index: int
    since: int
    encoding: str = "int64s"
    onnx_attr: str | None = None

    @property
    def attr_before(self) -> str:
        return self.onnx_attr or self.attr


@dataclass(frozen=True, slots=True)
class OpMapping:
    onnx_type: str
    mdsl_type: str
    attr_inputs: tuple[AttrInput, ...] = ()
    ignored: tuple[tuple[str, object], ...] = ()
    extra_outputs: tuple[str, ...] = ()
    since: int = 1

    def attr_inputs_at(self, opset: int) -> dict[int, AttrInput]:
        """ONNX input position -> AttrInput, for the inputs that are attrs in mdsl."""
        return {a.index: a for a in self.attr_inputs if opset >= a.since}

    def attr_renames_at(self, opset: int) -> dict[str, str]:
        """ONNX attribute -> mdsl attribute, where the names differ at `opset`."""
        return {
            a.attr_before: a.attr
            for a in self.attr_inputs
            if opset < a.since and a.attr_before != a.attr
        }


def _same(*names: str, since: int = 1) -> list[OpMapping]:
    return [OpMapping(n, n, since=since) for n in names]


def _reduce(name: str, axes_since: int) -> OpMapping:
    return OpMapping(name, name, (AttrInput("axes", 1, axes_since),))


_POOL_IGNORED = (("storage_order", ANY),)  # only changes the Indices output mdsl lacks

_TABLE = [
    *_same("Abs", "Add", "And", "Ceil", "Cos", "Div", "Equal", "Erf", "Exp", "Floor"),
    *_same("Greater", "Less", "Log", "MatMul", "Mul", "Neg", "Not", "Or", "Pow"),
    *_same("Reciprocal", "Relu", "Sigmoid", "Sign", "Sin", "Sqrt", "Sub", "Tanh", "Xor"),
    *_same("Where", "IsNaN", "PRelu", "Softplus", "Identity", "Max", "Min", "Size"),
    *_same("GreaterOrEqual", "LessOrEqual", since=12),
    *_same("Round", "HardSwish", since=11),
    *_same("Elu", "LeakyRelu", "HardSigmoid", "Flatten", "Transpose", "Gather"),
    *_same("Concat", "Einsum", "GatherElements", "ScatterElements", "DepthToSpace"),
    *_same("GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization"),
    *_same("GatherND", "ScatterND", "ConvTranspose"),
    *_same("Acos", "Asin", "Atan", "Acosh", "Asinh", "Atanh"),
    *_same("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", since=18),
    *_same("BitShift", since=11),
    *_same("EyeLike", "ReverseSequence", since=10),
    *_same("Compress", since=9),
    *_same("Unique", since=11),
    *_same("GridSample", since=16),
    OpMapping("BitCast", "BitCast", since=26),
    OpMapping("Trilu", "Trilu", (AttrInput("k", 1, 14, "int64"),), since=14),
    OpMapping("SpaceToDepth", "SpaceToDepth", ignored=(("mode", "DCR"),)),
    *_same("Mod", "Gemm", "ArgMax", "ArgMin", "DequantizeLinear", "Shape", "Conv"),
    OpMapping("Gelu", "Gelu", since=20),
    OpMapping("QuantizeLinear", "QuantizeLinear"),
    OpMapping("Cast", "Cast", ignored=(("saturate", ANY), ("round_mode", ANY))),  # see the rule
    OpMapping("MaxPool", "MaxPool", ignored=_POOL_IGNORED, extra_outputs=("Indices",)),
    OpMapping("AveragePool", "AveragePool"),
    OpMapping(
        "BatchNormalization",
        "BatchNormalization",
        ignored=(("spatial", 1),),
        extra_outputs=("running_mean", "running_var", "saved_mean", "saved_var"),
    ),
    OpMapping(
        "LayerNormalization",
        "LayerNormalization",
        ignored=(("stash_type", ANY),),
        extra_outputs=("Mean", "InvStdDev"),
        since=17,
    ),
    OpMapping(
        "GroupNormalization",
        "GroupNormalization",
        ignored=(("stash_type", ANY),),
        since=21,
    ),
    OpMapping("Reshape", "Reshape", (AttrInput("shape", 1, 5),)),
    OpMapping("Expand", "Expand", (AttrInput("shape", 1, 8),)),
    OpMapping("Tile", "Tile", (AttrInput("repeats", 1, 6),)),
    OpMapping("Squeeze", "Squeeze", (AttrInput("axes", 1, 13),)),
    OpMapping("Unsqueeze", "Unsqueeze", (AttrInput("axes", 1, 13),)),
    OpMapping(
        "Slice",
        "Slice",
        tuple(AttrInput(a, i, 10) for i, a in enumerate(("starts", "ends", "axes", "steps"), 1)),
    ),
    OpMapping(
        "Pad",
        "Pad",
        (
            AttrInput("pads", 1, 11),
            AttrInput("constant_value", 2, 11, "like_data", onnx_attr="value"),
            AttrInput("axes", 3, 18),
        ),
    ),
    OpMapping("TopK", "TopK", (AttrInput("k", 1, 10, "int64s"),)),
    OpMapping("OneHot", "OneHot", (AttrInput("depth", 1, 9, "int64"),)),
    OpMapping("CumSum", "CumSum", (AttrInput("axis", 1, 11, "int64"),)),
    OpMapping("CumProd", "CumProd", (AttrInput("axis", 1, 26, "int64"),), since=26),
    *_same("NonZero"),
    OpMapping(
        "NonMaxSuppression",
        "NonMaxSuppression",
        (
            AttrInput("max_output_boxes_per_class", 2, 10, "int64"),
            AttrInput("iou_threshold", 3, 10, "float"),
            AttrInput("score_threshold", 4, 10, "float"),
        ),
    ),
    OpMapping("ConstantOfShape", "ConstantOfShape", (AttrInput("shape", 0, 9),)),
    OpMapping(
        "Dropout",
        "Dropout",
        (AttrInput("ratio", 1, 12, "float"),),
        extra_outputs=("mask",),
    ),
    OpMapping("Split", "Split", (AttrInput("split", 1, 13),)),
    _reduce("ReduceSum", 13),
    *(
        _reduce(f"Reduce{kind}", 18)
        for kind in ("Mean", "Max", "Min", "Prod", "L1", "L2", "LogSumExp", "SumSquare")
    ),
]

MAPPINGS: dict[str, OpMapping] = {m.onnx_type: m for m in _TABLE}
# mdsl op type -> its mapping (every entry above keeps its name)
BY_MDSL_TYPE: dict[str, OpMapping] = {m.mdsl_type: m for m in _TABLE}

# Reductions whose empty `axes` means "no reduction" when noop_with_empty_axes is set.
REDUCTIONS = frozenset(m.onnx_type for m in _TABLE if m.onnx_type.startswith("Reduce"))

# ONNX TensorProto element types mdsl has (the enum values are fixed by the ONNX spec).
_ONNX_ELEM_TYPES = {
    1: DType.float32,
    2: DType.uint8,
    3: DType.int8,
    4: DType.uint16,
    5: DType.int16,
    6: DType.int32,
    7: DType.int64,
    12: DType.uint32,
    13: DType.uint64,
    9: DType.bool_,
    10: DType.float16,
    11: DType.float64,
    16: DType.bfloat16,
    17: DType.float8_e4m3fn,
    18: DType.float8_e4m3fnuz,
    19: DType.float8_e5m2,
    20: DType.float8_e5m2fnuz,
    21: DType.uint4,
    22: DType.int4,
    23: DType.float4_e2m1fn,
    24: DType.float8_e8m0fnu,
    25: DType.uint2,
    26: DType.int2,
}
_ELEM_TYPE_OF = {d: e for e, d in _ONNX_ELEM_TYPES.items()}


def dtype_from_onnx(elem_type: int) -> DType | None:
    """The mdsl dtype of an ONNX element type, or None when mdsl has no such dtype."""
    return _ONNX_ELEM_TYPES.get(int(elem_type))


def onnx_elem_type(dtype: DType) -> int:
    return _ELEM_TYPE_OF[DType.of(dtype)]


def onnx_type_name(elem_type: int) -> str:
    """A readable name of an ONNX element type ("UINT32", "STRING", ...)."""
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(int(elem_type))
    except ValueError:
        return f"element type {elem_type}"


def constant_input_positions(op_type: str, opset: int) -> tuple[int, ...]:
    """ONNX input positions of `op_type` that mdsl needs as compile-time constants."""
    from mdsl.frontends.onnx_rules import RULE_CONSTANT_INPUTS

    mapping = MAPPINGS.get(op_type)
    positions = set(mapping.attr_inputs_at(opset)) if mapping is not None else set()
    positions |= set(RULE_CONSTANT_INPUTS.get(op_type, ()))
    return tuple(sorted(positions))


def int_array(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)
