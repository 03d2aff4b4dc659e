"""`conv3d_as_conv2d`: a 3-D convolution as one 2-D convolution over depth slices plus a
sum over the depth taps, so compiled targets run it with their 2-D kernels.

With x (N, C, D, H, W) and w (M, C/g, KD, KH, KW), the depth slices of x become a batch
(N*D, C, H, W) convolved once with every depth tap's 2-D kernel at a time (weights
(M*KD, C/g, KH, KW), output channel m*KD + kd, which keeps each group's channels
together), giving Y (N, D, M, KD, OH, OW). Output depth od then sums, over the taps,
Y at input depth od*stride - pad + kd*dilation (zero outside the input):

    y[n, m, od] = sum_kd Ypadded[n, od*stride + kd*dilation, m, kd]

one strided Slice of the depth-padded Y per tap, added up, and moved back to channels
first. Stride 1 along depth computes no wasted products; a depth stride s computes s
times the products it needs (every input depth is convolved).
"""

from __future__ import annotations

from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Graph, Tensor
from mdsl.ops.windows import concrete_padding, window_of
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Match, Pat, PatternMatcher


def _conv3d(m: Match) -> Tensor | None:
    node = m.root
    x, w = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if len(x.shape) != 5 or x.dtype != DType.float32:
        return None
    if any(isinstance(d, Dim) for d in (*x.shape[1:], *w.shape)):
        return None
    window = window_of(node.attrs, tuple(w.shape[2:]))
    pad = concrete_padding(window, tuple(x.shape[2:]))
    depth_taps = w.shape[2]
    channels, depth = x.shape[1], x.shape[2]
    out_channels = w.shape[0]
    slices = m.emit("Transpose", [x], {"perm": (0, 2, 1, 3, 4)})  # (N, D, C, H, W)
    batch = m.emit("Reshape", [slices], {"shape": (-1, channels, *x.shape[3:])})
    taps = m.emit("Transpose", [w], {"perm": (0, 2, 1, 3, 4)})  # (M, KD, C/g, KH, KW)
    kernels = m.emit(
        "Reshape", [taps], {"shape": (out_channels * depth_taps, *w.shape[1:2], *w.shape[3:])}
    )
    planes = m.emit(
        "Conv",
        [batch, kernels, None],
        {
            "auto_pad": "NOTSET",
            "kernel_shape": None,
            "strides": window.strides[1:],
            "dilations": window.dilations[1:],
            "pads": (*pad.begins[1:], *pad.ends[1:]),
            "group": node.attrs.get("group", 1),
        },
    )
    out_h, out_w = pad.out[1:]
    y = m.emit("Reshape", [planes], {"shape": (-1, depth, out_channels, depth_taps, out_h, out_w)})
    if pad.begins[0] or pad.ends[0] or pad.overhang[0]:
        ends = pad.ends[0] + pad.overhang[0]
        y = m.emit("Pad", [y], {"pads": (pad.begins[0], ends), "axes": (1,)})
    stride, dilation, out_d = window.strides[0], window.dilations[0], pad.out[0]
    total = None
    for kd in range(depth_taps):
        start = kd * dilation
        tap = m.emit(
            "Slice",
            [y],
            {
                "starts": (start, kd),
                "ends": (start + (out_d - 1) * stride + 1, kd + 1),
                "axes": (1, 3),
                "steps": (stride, 1),
            },
        )
        tap = m.emit("Squeeze", [tap], {"axes": (3,)})  # (N, OD, M, OH, OW)
        total = tap if total is None else m.emit("Add", [total, tap])
    out = m.emit("Transpose", [total], {"perm": (0, 2, 1, 3, 4)})
    if bias is None:
        return out
    per_channel = m.emit("Reshape", [bias], {"shape": (out_channels, 1, 1, 1)})
    return m.emit("Add", [out, per_channel])


RULES = PatternMatcher([(Pat("Conv"), _conv3d)])


@register("conv3d_as_conv2d", levels=(2, 3))
def conv3d_as_conv2d(g: Graph) -> PassResult:
    """Rewrite float32 3-D convolutions as a 2-D convolution over depth slices and a sum
    over the depth taps.

    >>> import mdsl
    >>> with mdsl.Graph("video") as g:
    ...     x = g.input("x", (1, 3, 4, 8, 8))
    ...     g.output(mdsl.ops.conv(x, mdsl.param("w", (4, 3, 2, 3, 3)), pads=(0, 1, 1) * 2), "y")
    >>> sorted({n.op_type for n in mdsl.passes.run(g, ["conv3d_as_conv2d", "dce"]).nodes})
    ['Add', 'Const', 'Conv', 'Input', 'Output', 'Reshape', 'Slice', 'Squeeze', 'Transpose']
    """
    count = RULES.sweep(g)
    return PassResult(g, count > 0, f"rewrote {count} 3-D Conv(s) as 2-D")
