"""The op library: builders are snake_case, IR op types are ONNX names.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph() as g:
...     x = g.input("x", ("N", 8))
...     g.output(ops.relu(ops.matmul(x, mdsl.param("w", (8, 4)))), "y")
>>> [n.op_type for n in g.nodes]
['Input', 'Const', 'MatMul', 'Relu', 'Output']
"""

from mdsl.ops import bindings, registry
from mdsl.ops.elementwise import (
    abs,
    add,
    div,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    mul,
    neg,
    pow,
    relu,
    sqrt,
    sub,
    tanh,
)
from mdsl.ops.linalg import matmul
from mdsl.ops.movement import cast, flatten, identity, reshape, slice, squeeze, transpose, unsqueeze
from mdsl.ops.reduce import reduce_max, reduce_mean, reduce_min, reduce_sum
