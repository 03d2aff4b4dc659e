"""ONNX frontend: `load` a model as an mdsl Graph, `export` a Graph as an ONNX model.

See `mdsl.frontends.onnx_import` and `mdsl.frontends.onnx_export` for what each
guarantees, and `mdsl.frontends.onnx_ops` for the op table both read.
"""

from mdsl.frontends.onnx_export import DEFAULT_OPSET, export, to_model_proto
from mdsl.frontends.onnx_import import load, mdsl_name
from mdsl.frontends.onnx_ops import MDSL_DOMAIN
from mdsl.frontends.onnx_rules import supported_op_types
from mdsl.frontends.onnx_sequences import flatten_feeds, pack_outputs

__all__ = [
    "DEFAULT_OPSET",
    "MDSL_DOMAIN",
    "export",
    "flatten_feeds",
    "load",
    "mdsl_name",
    "pack_outputs",
    "supported_op_types",
    "to_model_proto",
]
