"""`conv_transpose_as_matmul`: a transposed convolution whose kernel tiles its output
(kernel == strides, no pads, dilations or output_padding, one group) as a MatMul.

That is the upsampling layer of U-Nets, FCN and segmentation heads (`ConvTranspose2d(C, M,
kernel_size=2, stride=2)`): every output element is reached by exactly one kernel tap, so

    y[n, m, i*k + a, j*k + b] = sum_c x[n, c, i, j] * w[c, m, a, b] + bias[m]

is one MatMul of x with its channels last, `(N, H, W, C) @ (C, M*k*k)`, followed by a
pixel-shuffle-like Reshape/Transpose/Reshape and the bias: compiled targets run it as a
GEMM on packed weights instead of a Python callback, with no wasted work. Other transposed
convolutions are left as they are. 1-D and 3-D work the same way.
"""

from __future__ import annotations

import math

from mdsl.ir.dim import Dim
from mdsl.ir.graph import Graph, Tensor
from mdsl.ops.conv_transpose import resolved_geometry
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Match, Pat, PatternMatcher


def _tiling_kernel(m: Match) -> Tensor | None:
    node = m.root
    x, w = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    spatial, kernel = tuple(x.shape[2:]), tuple(w.shape[2:])
    if node.attrs.get("group", 1) != 1 or any(isinstance(d, Dim) for d in spatial):
        return None
    strides, dilations, pads, outs = resolved_geometry(
        spatial,
        kernel,
        **{k: node.attrs.get(k) for k in ("strides", "dilations", "pads", "output_padding")},
        output_shape=node.attrs.get("output_shape"),
        auto_pad=node.attrs.get("auto_pad", "NOTSET"),
    )
    tiles = strides == kernel and set(dilations) == {1} and not any(pads)
    if not tiles or outs != tuple(s * k for s, k in zip(spatial, kernel)):
        return None
    return _as_matmul(m, x, w, bias, spatial, kernel)


def _as_matmul(m: Match, x, w, bias, spatial: tuple, kernel: tuple) -> Tensor:
    rank, channels_out = len(spatial), w.shape[1]
    taps = math.prod(kernel)
    channels_last = m.emit("Transpose", [x], {"perm": (0, *range(2, rank + 2), 1)})
    weights = m.emit("Reshape", [w], {"shape": (w.shape[0], channels_out * taps)})
    product = m.emit("MatMul", [channels_last, weights])  # (N, *spatial, M * taps)
    split = m.emit("Reshape", [product], {"shape": (-1, *spatial, channels_out, *kernel)})
    # (N, S1.., M, k1..) -> (N, M, S1, k1, S2, k2, ..): each input position's tile in place
    interleave = [0, rank + 1]
    for axis in range(rank):
        interleave += [1 + axis, rank + 2 + axis]
    tiled = m.emit("Transpose", [split], {"perm": tuple(interleave)})
    out_spatial = tuple(s * k for s, k in zip(spatial, kernel))
    y = m.emit("Reshape", [tiled], {"shape": (-1, channels_out, *out_spatial)})
    if bias is None:
        return y
    per_channel = m.emit("Reshape", [bias], {"shape": (channels_out, *(1,) * rank)})
    return m.emit("Add", [y, per_channel])


RULES = PatternMatcher([(Pat("ConvTranspose"), _tiling_kernel)])


@register("conv_transpose_as_matmul", levels=(2, 3))
def conv_transpose_as_matmul(g: Graph) -> PassResult:
    """Rewrite transposed convolutions whose kernel tiles the output as MatMuls.

    >>> import mdsl
    >>> with mdsl.Graph("up") as g:
    ...     x = g.input("x", (1, 8, 4, 4))
    ...     y = mdsl.ops.conv_transpose(x, mdsl.param("w", (8, 3, 2, 2)), strides=(2, 2))
    ...     g.output(y, "y")
    >>> [n.op_type for n in mdsl.passes.run(g, ["conv_transpose_as_matmul", "dce"]).nodes]
    ['Input', 'Const', 'Transpose', 'Reshape', 'MatMul', 'Reshape', 'Transpose', 'Reshape', 'Output']
    """
    count = RULES.sweep(g)
    return PassResult(g, count > 0, f"rewrote {count} ConvTranspose(s) as MatMul")
