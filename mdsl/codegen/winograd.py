"""Which oneDNN convolutions the C target computes as Winograd F(2x2, 3x3) instead, and
their weights transformed at plan time (`csrc/templates/c/winograd.h.j2` computes them).

oneDNN 3.2 (the `onednn-cpu-gomp` wheel) has no Winograd kernel for CPUs, and its direct
3x3 kernel already runs at the core's peak: ResNet's 64-channel 3x3 convolutions on 56x56
took 2.05-2.2 ms (about 110 GFLOP/s on one Zen 4 core) in brgconv on NHWC, in jit on
nChw16c alike, against 2.11 ms in ONNX Runtime's MLAS. F(2x2, 3x3) takes 16 multiply-adds
per 2x2 outputs and channel pair where the direct convolution takes 36
(docs/cpu-kernels.md has the measurements). Its transforms add and subtract only, and
the weights' one (halves) is made in float64 here, so results stay as close to the exact
sum as the direct convolution's (measured: largest error against float64 2.1e-6 for
Winograd, 1.4e-6 for oneDNN's direct kernel, 64 channels).

A convolution runs so when oneDNN would run it in channels last (NHWC) at every team
size (`ConvProbe.same_layouts`), so the tensors around it are laid out as the plan made
them for oneDNN (its weights are not reordered for oneDNN, and its primitive is never
made: the descriptor of one thread's gives the layouts), and: 3x3, stride 1, no dilation, padding 1 on every side (the output
keeps the input's size), a group's input and output channels whole vectors of 16,
post-ops that are ReLU, Clip and a residual sum only, at least `MIN_CHANNELS` input
channels and `MIN_PAIRS` channel pairs (input x output) in a group, and an expected
time below oneDNN's (`expected_ratio`). A grouped convolution (RegNet's groups of 64)
is one GEMM per group and point over the same transformed tiles.

The weights of one point are laid out in panels of 16 output channels (cin rows of 16
floats, `transformed_weights`), so the product kernel reads them in order; weights past
one core's L2 are shared by strips of `MDSL_WINO_SHARED_TILES` tiles (the kernel's
header). Measured against oneDNN's brgconv on a Zen 3 core (AVX2, 512 KiB of L2; one
convolution with ReLU and the relayouts around it, Winograd's time / oneDNN's, thread CPU
time at 1 thread, wall at 2, medians of 20 interleaved calls):

- ResNet's and VGG's shapes: 64 channels on 56x56 0.65 / 0.62, 128 on 28x28 0.61 / 0.42,
  256 on 14x14 0.55 / 0.53, 512 on 7x7 0.90 / 0.75, 128 -> 256 on 56x56 0.59 / 0.54,
  256 on 56x56 0.58 / 0.77, 512 on 28x28 0.66 / 0.54, 512 on 14x14 0.66 / 0.53, 128 on
  112x112 0.58 / 0.58;
- SqueezeNet's, DenseNet's and Inception's: 64 -> 256 on 13x13 0.61 / 0.61, 48 -> 192
  on 13x13 0.74 / 0.73, 32 -> 128 on 27x27 0.71 / 0.69, 128 -> 32 on 56x56 to 7x7
  0.66-0.70 / 0.62-0.78, 96 on 28x28 0.66 / 0.67, 128 -> 192 on 14x14 0.57 / 0.59;
- few channels: 16 -> 64 on 55x55 0.87 / 0.83, 16 -> 32 on 28x28 0.84 / 0.94, 32 -> 16
  on 56x56 0.88 / 0.93, and 16 -> 16 on 56x56 1.21 / 1.17 (the transforms cost what the
  products save: outside `MIN_PAIRS`).

Before the panels (weights read a row of cin x cout floats apart) and the shared strips
(every strip of 2-4 tiles read all the weights again), 256 channels on 14x14 took 1.39x
oneDNN's time and 512 on 7x7 7.6x, so the rule stopped at 128 x 128 channel pairs.
`MDSL_WINOGRAD=0` keeps oneDNN's direct kernel everywhere.
"""

from __future__ import annotations

import math
import os

import numpy as np

from mdsl.codegen import kir, onednn

G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
MIN_CHANNELS = 16
MIN_PAIRS = 512  # input x output channels: 16 x 16 lost, 16 x 32 and 32 x 16 won
POST_OPS = ("relu", "clip", "sum")
FEW_PAIRS = 2048  # below this many channel pairs the transforms weigh more (`expected_ratio`)
MAX_EXPECTED_RATIO = 1.0  # Winograd where its time is expected below oneDNN's


def enabled() -> bool:
    """Whether plans may use the Winograd kernel (`MDSL_WINOGRAD=0` turns it off)."""
    return os.environ.get("MDSL_WINOGRAD", "1") != "0"


def eligible(k: kir.Conv, probe: onednn.ConvProbe) -> bool:
    """Whether the oneDNN convolution `k` (oneDNN's choice `probe`) runs as Winograd
    F(2x2, 3x3): see the module's doc.

    >>> from types import SimpleNamespace as K
    >>> nhwc = onednn.ConvProbe("brgconv", 0, 0, "acdb", "acdb", True)
    >>> conv = dict(kh=3, kw=3, stride=(1, 1), dilation=(1, 1), pad=(1, 1), group=1,
    ...             c=64, cout=64, h=56, w_in=56, oh=56, ow=56, post_ops=(("relu",),))
    >>> eligible(K(**conv), nhwc), eligible(K(**{**conv, "stride": (2, 2), "oh": 28}), nhwc)
    (True, False)
    >>> eligible(K(**{**conv, "cout": 24}), nhwc), eligible(K(**{**conv, "c": 16}), nhwc)
    (False, True)
    >>> eligible(K(**{**conv, "c": 16, "cout": 16}), nhwc)  # fewer than MIN_PAIRS
    False
    >>> eligible(K(**{**conv, "c": 512, "cout": 512}), nhwc)
    True
    >>> eligible(K(**{**conv, "c": 256, "cout": 256, "group": 4}), nhwc)  # 64 a group
    True
    >>> eligible(K(**{**conv, "c": 128, "cout": 128, "group": 32}), nhwc)  # 4 a group
    False
    """
    group_in, group_out = group_channels(k)
    return (
        enabled()
        and (k.kh, k.kw, k.stride, k.dilation, k.pad) == (3, 3, (1, 1), (1, 1), (1, 1))
        and (k.oh, k.ow) == (k.h, k.w_in)
        and group_in >= MIN_CHANNELS
        and group_in * group_out >= MIN_PAIRS
        and group_in % 16 == 0
        and group_out % 16 == 0
        and all(op[0] in POST_OPS for op in k.post_ops)
        and probe.src_layout == probe.dst_layout == "acdb"
        and probe.same_layouts
        and expected_ratio(k) < MAX_EXPECTED_RATIO
    )


def group_channels(k: kir.Conv) -> tuple[int, int]:
    """Input and output channels of one of `k`'s groups."""
    return k.c // k.group, k.cout // k.group


def expected_ratio(k: kir.Conv) -> float:
    """Winograd's time over oneDNN's direct kernel for `k`, as measured on a Zen 3 core
    (the module's doc): 0.7, or 0.9 below `FEW_PAIRS` channel pairs in a group, times the work of
    the 2x2 tiles over the outputs they keep (13x13 outputs take 14x14's work).

    >>> from types import SimpleNamespace as K
    >>> round(expected_ratio(K(c=64, cout=256, group=1, oh=13, ow=13)), 2)  # SqueezeNet's fire9
    0.81
    >>> round(expected_ratio(K(c=16, cout=64, group=1, oh=55, ow=55)), 2)  # SqueezeNet's fire2
    0.93
    >>> round(expected_ratio(K(c=256, cout=80, group=1, oh=3, ow=3)), 2)  # 16 outputs' work for 9
    1.24
    """
    tiles = 4 * math.ceil(k.oh / 2) * math.ceil(k.ow / 2)
    group_in, group_out = group_channels(k)
    base = 0.9 if group_in * group_out < FEW_PAIRS else 0.7
    return base * tiles / (k.oh * k.ow)


def transformed_weights(w: np.ndarray) -> np.ndarray:
    """OIHW 3x3 weights as the kernel reads them, made in float64: for each of the 16
    points, panels of 16 output channels, each cin rows of 16 floats (cin: the input
    channels of a group; a group's output channels are whole panels):
    u[4 i + j][co // 16][cin][co % 16] = (G g G^T)[i, j] for the filter g of output
    channel co over input channel cin.

    >>> w = np.zeros((32, 1, 3, 3), np.float32); w[17, 0, 1, 1] = 1.0  # a centre tap
    >>> transformed_weights(w).shape
    (16, 2, 1, 16)
    >>> transformed_weights(w)[:, 1, 0, 1].reshape(4, 4)  # output channel 17
    array([[ 0.  ,  0.  ,  0.  ,  0.  ],
           [ 0.  ,  0.25, -0.25,  0.  ],
           [ 0.  , -0.25,  0.25,  0.  ],
           [ 0.  ,  0.  ,  0.  ,  0.  ]], dtype=float32)
    """
    cout, cin = w.shape[:2]
    u = np.einsum("ak,ockl,bl->abco", G, w.astype(np.float64), G)
    panels = u.reshape(16, cin, cout // 16, 16).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(panels, dtype=np.float32)
