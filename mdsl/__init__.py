"""mdsl: a Python graph-definition DSL and graph compiler for AI accelerators.

>>> import mdsl
>>> @mdsl.layer
... def mlp(x):
...     return mdsl.ops.relu(x @ mdsl.param("w", (4, 4)))
>>> with mdsl.Graph("demo") as g:
...     g.output(mlp(g.input("x", ("N", 4))), "y")
>>> g.node("mlp/MatMul").source is not None
True
"""

from mdsl import _moved

_moved.install()  # old import paths of moved modules keep working

from mdsl import expr, frontends, ops, passes  # frontends loads onnx/torch on first use
from mdsl.builder.control_flow import cond, switch, while_loop
from mdsl.ir import dtype as _dtype
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
from mdsl.ops import tensor_methods as _tensor_methods  # installs Tensor operators
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, In, check
from mdsl.ops.scopes import device, layer, param, scope
from mdsl.passes.manager import optimize
from mdsl.runtime.compile import compile
from mdsl.runtime.emit import emit
from mdsl.runtime.saved import load_executable
from mdsl.targets.python.interpreter import interpret
from mdsl.tools import notebook as _notebook  # installs Graph/Node/Tensor _repr_html_
from mdsl.tools import viz
from mdsl.tools.bisection import bisect
from mdsl.tools.compare import compare
from mdsl.tools.diff import diff

bool_ = DType.bool_
int8, uint8, int16, int32, int64 = DType.int8, DType.uint8, DType.int16, DType.int32, DType.int64
uint16, uint32, uint64 = DType.uint16, DType.uint32, DType.uint64
float16, bfloat16, float32, float64 = DType.float16, DType.bfloat16, DType.float32, DType.float64
ND, NCHW, NHWC, NC1HWC0, FRACTAL_NZ = (
    Format.ND,
    Format.NCHW,
    Format.NHWC,
    Format.NC1HWC0,
    Format.FRACTAL_NZ,
)

__version__ = "0.1.0"

# signatures, reprs and tracebacks name the public classes as users import them
for _public in (Graph, Node, Tensor, Layer, TensorType, DType, Format, Dim):
    _public.__module__ = "mdsl"
