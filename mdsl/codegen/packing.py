"""Weights packed at plan time into the layout a C kernel reads.

A GEMM whose right operand is a float32 constant runs as `mdsl_sgemm_packed` (the C
runtime's packed-weight kernel, `csrc/templates/c/packed_gemm.h.j2`) on `B` packed once
into panels of `PANEL` columns: panel p holds `B[k, p*PANEL + j]` at `(p*K + k)*PANEL + j`,
zero past the last column, in an even number of panels (an AVX-512 tile reads two). BLAS
packs B again on every call, which costs as much as the product itself when M is small
(a decoder step, a batch of one, a sequence of 17 tokens);
measured on a 2-core AVX-512 Xeon, thread CPU time, against OpenBLAS 0.3.34 SkylakeX:
M=17, K=768, N=2304 0.32-0.38x; M=8, K=768, N=3072 0.3x; M=128, K=768, N=3072 0.7x;
M=1024, K=768, N=768 1.02x; tiny K loses (M=3136, K=24 1.1-1.3x), so K < MIN_K stays
with BLAS.
"""

from __future__ import annotations

import math

import numpy as np

from mdsl.codegen import kir, onednn, winograd
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import CONST, Node, Tensor

PANEL = 16  # MDSL_PK_NR of the C kernel: one AVX2 tile's columns, half an AVX-512 tile's
TILE_ALIGN = 2 * PANEL  # column tiles of a packed GEMM start at multiples of this
MIN_K = 64


def pack_panels(b: np.ndarray) -> np.ndarray:
    """`b` (K, N) as an even number of panels of PANEL columns, flat.

    >>> b = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> pack_panels(b).reshape(-1, 2, PANEL)[:, :, :4]
    array([[[0., 1., 2., 0.],
            [3., 4., 5., 0.]],
    <BLANKLINE>
           [[0., 0., 0., 0.],
            [0., 0., 0., 0.]]], dtype=float32)
    """
    k, n = b.shape
    panels = -(-n // TILE_ALIGN) * 2
    out = np.empty((panels, k, PANEL), b.dtype)  # one pass over b, whatever its layout
    full = n // PANEL
    out[:full] = b[:, : full * PANEL].reshape(k, full, PANEL).transpose(1, 0, 2)
    out[full:] = 0
    if full * PANEL < n:
        out[full, :, : n - full * PANEL] = b[:, full * PANEL :]
    return out.reshape(-1)


def constant_value(t: Tensor) -> np.ndarray | None:
    """The value of `t` if a Const node makes it, else None."""
    node = t.producer
    return node.const_value() if node is not None and node.op_type == CONST else None


def with_packed_weights(ctx, g: kir.Gemm, b: Tensor) -> kir.Gemm:
    """`g` reading a packed copy of its constant right operand `b`, when the target takes
    derived constants and the packed kernel computes `g` (float32, one matrix, A not
    transposed, alpha 1, static N and K); else `g`."""
    if ctx.derived_constant is None or g.dtype != DType.float32 or g.batch_shape:
        return g
    if g.trans_a or g.alpha != 1.0 or len(b.shape) != 2:
        return g
    if any(isinstance(v, Dim) for v in (g.n, g.k)) or g.k < MIN_K:
        return g
    value = constant_value(b)
    if value is None or value.dtype != np.float32:
        return g
    matrix = value.T if g.trans_b else value
    g.packed_b = ctx.derived_constant(pack_panels(matrix), DType.float32)
    return g


# -- convolution ------------------------------------------------------------------------------------
CONV_PANEL = 12  # MDSL_PC_PANEL of the C kernel: output channels per weight panel
CONV_STRIP = 32  # output grid positions per register tile
CONV_SLACK = 2 * CONV_STRIP  # floats past the source a last strip may read


def pack_conv_panels(w: np.ndarray) -> np.ndarray:
    """OIHW weights `w` as panels of CONV_PANEL output channels, flat: panel b holds
    `W[b * CONV_PANEL + r, k]` (k over input channel, kernel row, kernel column) at
    `(b * K + k) * CONV_PANEL + r`, zero past the last channel.

    >>> w = np.arange(4, dtype=np.float32).reshape(2, 2, 1, 1)
    >>> pack_conv_panels(w).reshape(-1, 2, CONV_PANEL)[0, :, :3]
    array([[0., 2., 0.],
           [1., 3., 0.]], dtype=float32)
    """
    cout = w.shape[0]
    matrix = w.reshape(cout, -1)
    panels = -(-cout // CONV_PANEL)
    padded = np.zeros((panels * CONV_PANEL, matrix.shape[1]), w.dtype)
    padded[:cout] = matrix
    return np.ascontiguousarray(padded.reshape(panels, CONV_PANEL, -1).transpose(0, 2, 1)).reshape(
        -1
    )


def padded_extent(k: kir.Conv) -> tuple[int, int]:
    """(rows, columns) of the zero-padded input plane the outputs of `k` read."""
    (sh, sw), (dh, dw) = k.stride, k.dilation
    return (k.oh - 1) * sh + (k.kh - 1) * dh + 1, (k.ow - 1) * sw + (k.kw - 1) * dw + 1


def conv_source_grid(k: kir.Conv) -> tuple[bool, int, int, np.ndarray]:
    """(direct, grid width, source floats, tap offsets) of the packed convolution `k`;
    the offsets are a group's, from its source (`group_source_floats`).

    Stride 1 reads a zero-padded copy of the input directly: output (oy, ox) sits at
    grid position oy * Wp + ox of the padded width Wp, and tap (c, i, j) at offset
    c * Hp * Wp + i * dh * Wp + j * dw from it (grid columns past the output's width
    are computed and dropped). Other strides read an im2col matrix: the grid is the
    output, tap k's row starts at k * oh * ow."""
    (dh, dw), kernel_taps, cg = k.dilation, k.kh * k.kw, k.c // k.group
    if k.stride == (1, 1):
        hp, wp = padded_extent(k)
        c, i, j = np.meshgrid(np.arange(cg), np.arange(k.kh), np.arange(k.kw), indexing="ij")
        offsets = (c * hp * wp + i * dh * wp + j * dw).reshape(-1)
        return True, wp, k.c * hp * wp + CONV_SLACK + (k.kw - 1) * dw, offsets
    grid = k.oh * k.ow
    offsets = np.arange(cg * kernel_taps) * grid
    return False, k.ow, k.c * kernel_taps * grid + CONV_SLACK, offsets


def group_source_floats(k: kir.Conv) -> int:
    """How far apart two groups' sources lie in a packed convolution's staged source:
    the group's input channels of the padded copy, or its rows of the im2col matrix."""
    per_channel = math.prod(padded_extent(k)) if k.stride == (1, 1) else k.kh * k.kw * k.oh * k.ow
    return k.c // k.group * per_channel


def with_packed_conv_weights(ctx, k: kir.Conv, w: Tensor) -> kir.Conv:
    """`k` on packed weights when the target takes derived constants and `k` is a
    convolution of a constant float32 weight, dense or `packs_groups`; else `k`. A
    grouped one's weights are packed group after group."""
    if ctx.derived_constant is None or (k.group != 1 and not packs_groups(k)):
        return k
    value = constant_value(w)
    if value is None or value.dtype != np.float32:
        return k
    _, grid_width, source, offsets = conv_source_grid(k)
    if source >= 1 << 31:
        return k
    packed = np.concatenate([pack_conv_panels(part) for part in np.split(value, k.group)])
    k.packed_w = ctx.derived_constant(packed, DType.float32)
    k.offsets = ctx.derived_constant(offsets.astype(np.int32), DType.int32)
    k.grid_width = grid_width
    k.scratch_elems = source
    return k


def packs_groups(k: kir.Conv) -> bool:
    """Whether the grouped convolution `k` runs on packed weights rather than as one
    OpenBLAS GEMM per group: one with a window wider than 1x1 (a depthwise one has
    kernels of its own). One core, Zen 3, packed / OpenBLAS with ReLU: 32 groups of
    4 -> 4 channels 3x3 on 56x56 0.53 (three ResNeXt-50 stage-1 blocks: 1.35 -> 1.21 of
    ORT), 8 groups of 16 on 28x28 1.02, 4 groups of 64 on 14x14 1.00 and at stride 2
    0.98. A grouped 1x1 stays on OpenBLAS: 1.1-1.5 alone (ShuffleNet's shapes) and
    ShuffleNet 6.0 -> 7.1 ms."""
    return k.group > 1 and not k.group == k.c == k.cout and k.kh * k.kw > 1


def onednn_geometry(k: kir.Conv) -> onednn.ConvShape:
    """`k` as oneDNN's convolution takes it (groups first in the weights when grouped)."""
    (sh, sw), (ph, pw), (dh, dw) = k.stride, k.pad, k.dilation
    cg, coutg = k.c // k.group, k.cout // k.group
    w = (k.group, coutg, cg, k.kh, k.kw) if k.group > 1 else (k.cout, k.c, k.kh, k.kw)
    # the padding after the input the output size implies; 0 where the last window ends
    # inside the input (oneDNN's 1x1 kernels compute wrong results for a negative one)
    pad_b = max(0, (k.oh - 1) * sh + (k.kh - 1) * dh + 1 - k.h - ph)
    pad_r = max(0, (k.ow - 1) * sw + (k.kw - 1) * dw + 1 - k.w_in - pw)
    return onednn.ConvShape(
        (k.n, k.c, k.h, k.w_in),
        w,
        (k.n, k.cout, k.oh, k.ow),
        (sh, sw),
        (dh - 1, dw - 1),
        (ph, pw),
        (pad_b, pad_r),
        bool(k.bias),
        k.post_ops,
        k.onednn_act_tag,
    )


def activation_tag(k: kir.Conv) -> str:
    """The layout a oneDNN convolution's source and destination are asked in: "aBcd16b"
    (nCw16c, oneDNN's `jit` kernel) for a 1-D convolution of overlapping windows whose
    channels-last source puts the inputs of neighbouring outputs a multiple of 4 KiB
    apart, else "" (oneDNN's choice: channels last, its `brgconv` kernel). Those inputs
    fall into one set of the L1 cache: wav2vec2's 512 -> 512, kernel 3, stride 2 ones
    took 1.35-1.8x as long in brgconv as in jit (docs/cpu-kernels.md); 256 or 768
    channels, or windows that do not overlap (kernel 2 or 4 at stride 2 or 4), run
    alike in both or faster in brgconv.

    >>> from types import SimpleNamespace as K
    >>> wav2vec2 = K(group=1, h=1, kh=1, c=512, stride=(1, 2), kw=3, ow=1599)
    >>> activation_tag(wav2vec2), activation_tag(K(**{**vars(wav2vec2), "c": 768}))
    ('aBcd16b', '')
    """
    if k.group != 1 or k.h != 1 or k.kh != 1 or k.ow < 64 or k.kw <= k.stride[1]:
        return ""
    return "aBcd16b" if k.stride[1] * k.c * 4 % 4096 == 0 else ""


def with_onednn(ctx, k: kir.Conv, w: Tensor, chained: bool = False, fused=None) -> kir.Conv:
    """`k` computed by oneDNN when that is faster than the hand-written kernels: a
    convolution of constant float32 weights (reordered here into the primitive's layout,
    `packed_w`) and static sizes, for which oneDNN has a blocked kernel (`brgconv`,
    `brdgmm`, `jit`: not its im2col `gemm` or `ref` ones). A depthwise one, or a 1x1 one
    of little arithmetic per pixel (`dense_1x1`), only when it is `chained` to another
    convolution (its activations may then stay blocked, `mdsl.codegen.blocked`): alone,
    the two reorders between NCHW and the blocked layout cost more than oneDNN gains
    (docs/cpu-kernels.md has the measurements). `fused`
    (`onednn_post_ops`: post-ops and the residual's buffer) replaces the epilogue."""
    if ctx.derived_constant is None or isinstance(k.n, Dim) or not onednn.available():
        return k
    depthwise = k.group > 1 and k.group == k.c == k.cout
    cheap = depthwise or (k.kh * k.kw == 1 and not dense_1x1(k))
    if cheap and not chained:
        return k
    if k.kh * k.kw == 1 and k.group > 1:  # ShuffleNet's: not faster than mdsl's (measured)
        return k
    value = constant_value(w)
    if value is None or value.dtype != np.float32:
        return k
    epilogue = k.epilogue
    if fused is not None:  # oneDNN applies the epilogue itself
        k.post_ops, k.residual, k.bias = fused
        k.epilogue = None
        k.post_ops, k.silu = silu_last(k.post_ops)
    k.onednn_act_tag = activation_tag(k)
    probe = onednn.probe_conv(onednn_geometry(k))
    if k.onednn_act_tag and (probe is None or not probe.impl.startswith(onednn.FAST_IMPLS)):
        k.onednn_act_tag = ""  # not in that layout: oneDNN's choice
        probe = onednn.probe_conv(onednn_geometry(k))
    shape = onednn_geometry(k)
    if probe is None or not probe.impl.startswith(onednn.FAST_IMPLS):
        k.post_ops, k.residual, k.bias, k.epilogue, k.silu = (), "", "", epilogue, False
        k.onednn_act_tag = ""
        return k
    k.onednn = probe.impl
    k.onednn_src_elems = probe.src_elems
    k.onednn_dst_elems = probe.dst_elems
    k.src_layout, k.dst_layout = probe.src_layout, probe.dst_layout
    k.same_layouts = probe.same_layouts
    k.scratch_elems = probe.src_elems + probe.dst_elems
    if winograd.eligible(k, probe):  # oneDNN's weights are not needed: not reordered, not kept
        k.winograd = ctx.derived_constant(winograd.transformed_weights(value), DType.float32)
        return k
    k.onednn_weights = tuple(
        kir.DnnlWeights(
            ctx.derived_constant(w.values, DType.float32), int(w.values.size), w.layout, w.threads
        )
        for w in onednn.reordered_weights(shape, value)
    )
    k.packed_w = k.onednn_weights[0].buffer
    return k


# A lone 1x1 convolution goes to oneDNN, its input and output reordered around it, when it
# has at least DENSE_1X1 of arithmetic per element reordered, Cin * Cout / (Cin + Cout),
# on an output plane of at most SMALL_PLANE positions at stride 1. On larger planes the
# hand-written kernel's strips of 32 positions are nearly all full, and a strided one
# reorders an input larger than its output. 1 thread, AVX-512 Xeon, mdsl / ORT,
# hand-written against oneDNN with its reorders:
#   Cin -> Cout   plane          ratio  hand / oneDNN
#   128 -> 512    28x28          102    0.91 / 1.16
#   256 -> 256    28x28          128    1.02 / 1.13
#   256 -> 512    28x28          170    0.97 / 1.09
#   512 -> 512    28x28          256    1.07 / 1.10
#   256 -> 512    28x28 -> 14x14 170    0.96 / 1.16   (stride 2)
#   256 -> 256    14x14          128    1.19 / 1.03
#   384 -> 384    14x14          192    1.19 / 1.04
#   512 -> 512    14x14          256    1.21 / 1.06
#   1088 -> 1088  7x7            544    1.24 / 1.01
# Built for AVX2 there (`-mno-avx512f`, ONEDNN_MAX_CPU_ISA=AVX2), the same split: 256 ->
# 256 on 28x28 1.11 / 1.15 ms, 256 -> 512 on 28x28 2.10 / 2.17; 256 -> 256 on 14x14
# 0.27 / 0.25, 384 -> 384 on 14x14 0.68 / 0.57.
DENSE_1X1 = 128
SMALL_PLANE = 256


def dense_1x1(k: kir.Conv) -> bool:
    """Whether a lone 1x1 convolution is faster on oneDNN, reorders included
    (`DENSE_1X1`, `SMALL_PLANE`)."""
    small = k.stride == (1, 1) and k.oh * k.ow <= SMALL_PLANE
    return small and k.group == 1 and k.c * k.cout >= DENSE_1X1 * (k.c + k.cout)


def silu_last(post_ops: tuple) -> tuple[tuple, bool]:
    """`post_ops` without a last swish, and whether there was one: a SiLU the
    convolution's result ends with runs after the primitive as mdsl's vector pass over
    the result (`kir.Conv.silu`). oneDNN 3.2's swish post-op cost 2-4x as much (a 1x1
    32 -> 128 on 128x128: 1.3 ms the convolution alone, 3.0 ms with swish, 1.8-2.0 ms
    with the pass after it; docs/cpu-kernels.md). A swish before a sum stays a post-op.

    >>> silu_last((("sum",), ("swish",)))
    ((('sum',),), True)
    >>> silu_last((("swish",), ("sum",)))
    ((('swish',), ('sum',)), False)
    """
    if post_ops and post_ops[-1] == ("swish",):
        return post_ops[:-1], True
    return post_ops, False


def onednn_post_ops(anchor: Node, members: list[Node], outputs: list[Tensor]):
    """The fused members of a convolution as oneDNN post-ops: (post-ops, residual tensor
    or None), or None when they are not all of them ReLU, Clip of constant bounds, SiLU
    (x * Sigmoid(x): oneDNN's swish), Sigmoid (its logistic) and at most one Add of a
    tensor of the result's shape (a sum post-op), each applied to the previous one's
    result, with only the last result used outside the group.

    oneDNN applies them in order to the accumulator (bias added); the sum post-op adds
    what the destination held before the convolution, so the residual is copied there
    first."""
    value, post, residual = anchor.outputs[0], [], None
    members = list(members)
    while members:
        node = members.pop(0)
        if node.inputs[0] is not value and not (node.op_type == "Add" and value in node.inputs):
            return None
        if _silu(node, members, value):
            post.append(("swish",))
            node = members.pop(0)
        elif node.op_type == "Relu":
            post.append(("relu",))
        elif node.op_type == "Sigmoid":  # a squeeze-and-excitation's gate
            post.append(("logistic",))
        elif node.op_type == "Clip":
            bounds = [_scalar(t) for t in node.inputs[1:3]] + [None] * (3 - len(node.inputs))
            if any(b is False for b in bounds):
                return None
            lo, hi = (b if b is not None else d for b, d in zip(bounds, (-np.inf, np.inf)))
            post.append(("clip", float(lo), float(hi)))
        elif node.op_type == "Add" and residual is None:
            other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
            inside = other.producer in (anchor, *members)
            if inside or tuple(other.shape) != tuple(value.shape) or other.dtype != DType.float32:
                return None
            residual = other
            post.append(("sum",))
        else:
            return None
        value = node.outputs[0]
    if list(outputs) != [value]:
        return None
    return tuple(post), residual


def _silu(sigmoid: Node, rest: list[Node], value: Tensor) -> bool:
    """Whether `sigmoid` and the next member compute value * Sigmoid(value)."""
    if sigmoid.op_type != "Sigmoid" or not rest or rest[0].op_type != "Mul":
        return False
    return {id(t) for t in rest[0].inputs} == {id(value), id(sigmoid.outputs[0])}


_THROUGH = ("Relu", "Clip", "Add")  # what oneDNN fuses between convolutions
_LAYOUT_KEEPING = ("MaxPool", "AveragePool", "Concat")  # what keeps its layout (`blocked`)
_ELEMENT_WISE = ("BatchNormalization", "Mul", "Sub")  # run in the kept layout (`blocked`)
_SHUFFLE = ("Reshape", "Transpose")  # a channel shuffle (`channel_shuffle`)


def chained_to_conv(anchor: Node, outputs: list[Tensor]) -> bool:
    """Whether the convolution `anchor` reads another convolution's result (through
    ReLU, Clip, Add, pooling, Concat, a per-channel BatchNorm, Mul, Sub or a channel
    shuffle) or, unless it is depthwise, only convolutions, poolings and Concats read
    its group's `outputs`."""
    graph = anchor.graph
    if graph is None:
        return False
    frontier, seen = [anchor.inputs[0]], 0
    while frontier and seen < 16:
        t, seen = frontier.pop(), seen + 1
        node = t.producer
        if node is not None and node.op_type == "Conv":
            return True
        if (
            node is not None
            and node.op_type in _THROUGH + _LAYOUT_KEEPING + _ELEMENT_WISE + _SHUFFLE
        ):
            first = node.op_type in ("Clip", "BatchNormalization", "Reshape")
            frontier += [i for i in node.inputs[: 1 if first else None] if i is not None]
    group, channels = anchor.attrs.get("group", 1), anchor.inputs[0].shape[1]
    if group > 1 and group == channels == anchor.outputs[0].shape[1]:
        return False
    readers = [n for t in outputs for n, _ in graph.consumers(t)]
    return bool(readers) and all(n.op_type in ("Conv", *_LAYOUT_KEEPING) for n in readers)


def _scalar(t: Tensor | None):
    """The value of a constant scalar `t`, None for a missing input, False otherwise."""
    if t is None:
        return None
    value = constant_value(t)
    return False if value is None or value.size != 1 else float(value.reshape(()))
