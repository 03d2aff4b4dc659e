"""`conv_transpose_as_conv`: float32 transposed convolutions as ops compiled targets
generate code for, a MatMul or a Conv, instead of their numpy binding.

A kernel that tiles the output (kernel == strides, no pads, dilations or output_padding,
one group) is the upsampling layer of U-Nets, FCN and segmentation heads (`ConvTranspose2d(C, M,
kernel_size=2, stride=2)`): every output element is reached by exactly one kernel tap, so

    y[n, m, i*k + a, j*k + b] = sum_c x[n, c, i, j] * w[c, m, a, b] + bias[m]

is one MatMul of x with its channels last, `(N, H, W, C) @ (C, M*k*k)`, followed by a
pixel-shuffle-like Reshape/Transpose/Reshape and the bias: compiled targets run it as a
GEMM on packed weights instead of a Python callback, with no wasted work.

Any other is a stride-1 Conv of x spread out (stride - 1 zeros after each element along
each axis), padded by `(k - 1) * dilation - pad` per side (cropped where negative, plus
output_padding at the end), with the kernel flipped and its in/out channels swapped per
group. The inserted zeros cost work (4x the products for a 2-D stride of 2: DCGAN's
4x4/2 layer runs at about a quarter of the direct conv's rate) but it runs in the C
target's direct convolution. 1-D and 3-D work the same way (3-D Convs then go through
`conv3d_as_conv2d`).
"""

from __future__ import annotations

import math

from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Graph, Tensor
from mdsl.ops.conv_transpose import resolved_geometry
from mdsl.ops.movement import INT_MAX
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Match, Pat, PatternMatcher


def _rewritten(m: Match) -> Tensor | None:
    node = m.root
    x, w = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    spatial, kernel = tuple(x.shape[2:]), tuple(w.shape[2:])
    if x.dtype != DType.float32 or any(isinstance(d, Dim) for d in (*spatial, *w.shape)):
        return None
    strides, dilations, pads, outs = resolved_geometry(
        spatial,
        kernel,
        **{k: node.attrs.get(k) for k in ("strides", "dilations", "pads", "output_padding")},
        output_shape=node.attrs.get("output_shape"),
        auto_pad=node.attrs.get("auto_pad", "NOTSET"),
    )
    group = node.attrs.get("group", 1)
    tiles = strides == kernel and set(dilations) == {1} and not any(pads) and group == 1
    if tiles and outs == tuple(s * k for s, k in zip(spatial, kernel)):
        return _as_matmul(m, x, w, bias, spatial, kernel)
    return _as_conv(m, x, w, bias, strides, dilations, pads, outs, group)


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


def _as_conv(m: Match, x, w, bias, strides, dilations, pads, outs, group) -> Tensor:
    """The transposed convolution as a stride-1 Conv of x with zeros inserted between its
    elements (stride - 1 after each, along each axis), padded by `(k - 1) * dilation -
    pad` (cropped where that is negative), with the kernel flipped and its channel axes
    swapped per group."""
    rank, channels = len(strides), x.shape[1]
    spatial, kernel = x.shape[2:], w.shape[2:]
    spread = m.emit("Reshape", [x], {"shape": (-1, channels, *_interleave(spatial, (1,) * rank))})
    ends = _interleave((0,) * rank, tuple(s - 1 for s in strides))
    spread = m.emit(
        "Pad", [spread], {"pads": (0,) * (2 * rank) + ends, "axes": tuple(range(2, 2 + 2 * rank))}
    )
    spread = m.emit(
        "Reshape", [spread], {"shape": (-1, channels, *(i * s for i, s in zip(spatial, strides)))}
    )
    begins, finals, crop_start, crop_end = [], [], [], []
    for a in range(rank):
        reach = (kernel[a] - 1) * dilations[a]
        left = reach - pads[a]
        right = outs[a] - (spatial[a] * strides[a] + left - reach)  # the zeros already there count
        begins.append(max(0, left))
        finals.append(max(0, right))
        crop_start.append(max(0, -left))
        crop_end.append(spatial[a] * strides[a] - max(0, -right))
    if any(crop_start) or any(c != i * s for c, i, s in zip(crop_end, spatial, strides)):
        spread = m.emit(
            "Slice",
            [spread],
            {
                "starts": tuple(crop_start),
                "ends": tuple(crop_end),
                "axes": tuple(range(2, 2 + rank)),
                "steps": (1,) * rank,
            },
        )
    out_per_group = w.shape[1]
    grouped = m.emit("Reshape", [w], {"shape": (group, channels // group, out_per_group, *kernel)})
    swapped = m.emit("Transpose", [grouped], {"perm": (0, 2, 1, *range(3, 3 + rank))})
    weights = m.emit(
        "Reshape", [swapped], {"shape": (group * out_per_group, channels // group, *kernel)}
    )
    flipped = m.emit(
        "Slice",
        [weights],
        {
            "starts": (-1,) * rank,
            "ends": (-INT_MAX,) * rank,
            "axes": tuple(range(2, 2 + rank)),
            "steps": (-1,) * rank,
        },
    )
    conv_attrs = {
        "auto_pad": "NOTSET",
        "kernel_shape": None,
        "strides": (1,) * rank,
        "dilations": tuple(dilations),
        "pads": (*begins, *finals),
        "group": group,
    }
    return m.emit("Conv", [spread, flipped, bias], conv_attrs)


def _interleave(a: tuple, b: tuple) -> tuple:
    return tuple(v for pair in zip(a, b) for v in pair)


RULES = PatternMatcher([(Pat("ConvTranspose"), _rewritten)])


@register("conv_transpose_as_conv", levels=(2, 3))
def conv_transpose_as_conv(g: Graph) -> PassResult:
    """Rewrite float32 transposed convolutions as a MatMul (a kernel tiling the output)
    or a Conv of the input with zeros between its elements.

    >>> import mdsl
    >>> with mdsl.Graph("up") as g:
    ...     x = g.input("x", (1, 8, 4, 4))
    ...     y = mdsl.ops.conv_transpose(x, mdsl.param("w", (8, 3, 2, 2)), strides=(2, 2))
    ...     g.output(y, "y")
    >>> [n.op_type for n in mdsl.passes.run(g, ["conv_transpose_as_conv", "dce"]).nodes]
    ['Input', 'Const', 'Transpose', 'Reshape', 'MatMul', 'Reshape', 'Transpose', 'Reshape', 'Output']
    """
    count = RULES.sweep(g)
    return PassResult(g, count > 0, f"rewrote {count} ConvTranspose(s) as MatMul or Conv")
