"""The IR: graphs, nodes, tensors and their types. Imports nothing else of mdsl."""

from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import (
    CompileError,
    DTypeError,
    ExecutionError,
    GraphError,
    MdslError,
    ShapeError,
)
from mdsl.ir.format import Format
from mdsl.ir.graph import Graph, Layer, Node, Tensor
from mdsl.ir.serialize import load, save
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.verify import verify

__all__ = [
    "CompileError",
    "DType",
    "DTypeError",
    "Dim",
    "ExecutionError",
    "Format",
    "Graph",
    "GraphError",
    "Layer",
    "MdslError",
    "Node",
    "ShapeError",
    "Tensor",
    "TensorType",
    "load",
    "save",
    "verify",
]
