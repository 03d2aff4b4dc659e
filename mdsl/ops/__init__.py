"""The op library: builders are snake_case, IR op types are ONNX names.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph() as g:
...     x = g.input("x", ("N", 8))
...     g.output(ops.relu(ops.matmul(x, mdsl.param("w", (8, 4)))), "y")
>>> [n.op_type for n in g.nodes]
['Input', 'Const', 'MatMul', 'Relu', 'Output']
"""

# last: checks each built-in lowering against the prototypes declared above
from mdsl.ops import _device_kwarg, bindings, control_flow, expr_lowering, registry
from mdsl.ops.activation import (
    elu,
    gelu,
    hard_sigmoid,
    hard_swish,
    leaky_relu,
    prelu,
    sigmoid,
    silu,
    softplus,
)
from mdsl.ops.attention import attention
from mdsl.ops.bitwise import bit_shift, bitwise_and, bitwise_not, bitwise_or, bitwise_xor
from mdsl.ops.concatenation import concat, split
from mdsl.ops.contraction import einsum
from mdsl.ops.conv_transpose import conv_transpose
from mdsl.ops.creation import constant_of_shape, eye_like, range
from mdsl.ops.cumulative import cumprod, cumsum
from mdsl.ops.detection import non_max_suppression, nonzero
from mdsl.ops.elementwise import (
    abs,
    acos,
    acosh,
    add,
    asin,
    asinh,
    atan,
    atanh,
    ceil,
    clip,
    cos,
    div,
    equal,
    erf,
    exp,
    floor,
    greater,
    greater_equal,
    is_nan,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mod,
    mul,
    neg,
    pow,
    reciprocal,
    relu,
    round,
    rsqrt,
    sign,
    sin,
    sqrt,
    sub,
    tanh,
    where,
)
from mdsl.ops.filtering import compress, unique
from mdsl.ops.grid_sample import grid_sample
from mdsl.ops.indexing import gather, gather_elements, one_hot, scatter_elements
from mdsl.ops.indexing_nd import gather_nd, scatter_nd
from mdsl.ops.linalg import matmul, trilu
from mdsl.ops.movement import (
    bit_cast,
    cast,
    depth_to_space,
    expand,
    flatten,
    identity,
    reshape,
    reverse_sequence,
    slice,
    space_to_depth,
    squeeze,
    tile,
    transpose,
    unsqueeze,
)
from mdsl.ops.nn import (
    average_pool,
    batch_norm,
    conv,
    conv2d,
    dequantize_linear,
    dropout,
    gemm,
    global_average_pool,
    global_max_pool,
    group_norm,
    instance_norm,
    layer_norm,
    linear,
    log_softmax,
    max_pool,
    quantize_linear,
    softmax,
)
from mdsl.ops.padding import pad
from mdsl.ops.recurrent import gru, lstm, rnn
from mdsl.ops.reduce import (
    argmax,
    argmin,
    reduce_l1,
    reduce_l2,
    reduce_log_sum_exp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    reduce_sum_square,
)
from mdsl.ops.resizing import resize
from mdsl.ops.roi_align import roi_align
from mdsl.ops.runtime_sizes import (
    dynamic_crop,
    dynamic_reshape,
    dynamic_slice,
    dynamic_slice_axes,
    value_dims,
)
from mdsl.ops.selection import topk
from mdsl.ops.shape_query import shape, size
from mdsl.ops.spectral import dft
from mdsl.ops.storage import trans_data
from mdsl.ops.transfer import (
    memcpy_device_to_device,
    memcpy_device_to_host,
    memcpy_host_to_device,
    recv,
    send,
)

_device_kwarg.add_device_keyword(globals())
