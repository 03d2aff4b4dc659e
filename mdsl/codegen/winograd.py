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
them for oneDNN, and: 3x3, stride 1, no dilation, one group, padding 1 on every side
(the output keeps the input's size), input and output channels whole vectors of 16,
post-ops that are ReLU, Clip and a residual sum only, at least `MIN_CHANNELS` input
channels, and transformed weights of at most 1 MiB (`MAX_PAIRS` channel pairs: one core's
L2). Measured against oneDNN's brgconv (ReLU fused, thread CPU time at 1 thread, wall at
2; Winograd's time / oneDNN's): 32 channels on 56x56 0.74 / 0.85, 64 on 56x56 0.68 /
0.73 (batch 8: 0.67 / 0.70), 128 on 28x28 0.59 / 0.69; outside the rule 16 on 56x56
0.85 / 1.14 (the transforms cost what the products save), 256 on 14x14 0.81 / 1.12 and
512 on 7x7 4.6 / 2.9 (each strip of 2-4 tiles reads all the weights again, 4-16 MiB).
On a Zen 3 core (AVX2, where oneDNN runs its avx2 brgconv and the kernel 8-float
vectors) the same rule holds: 32 channels on 56x56 0.81 / 0.90, 64 on 56x56 0.71 / 0.71
(batch 8 at 2 threads 0.87), 128 on 28x28 0.88 / 0.68, 48 on 27x27 0.79 / 0.82, 64 to 256
on 27x27 0.78 at 2 threads.
A convolution inside that rule still keeps oneDNN's kernel where Winograd is not
expected to win (`expected_ratio`): a 2x2 tile past an odd edge computes outputs that are
thrown away (13x13 outputs take 14x14's work), and transformed weights well past a Zen 3
core's 512 KiB of L2 stream again for each strip of tiles (576 KiB still ran as fast as
smaller ones, 1 MiB did not; the line is drawn at 768 KiB). On that core, Winograd's time /
oneDNN's (thread CPU time, medians of 40 interleaved calls): 64 -> 256 channels on 13x13
1.12 (SqueezeNet's fire8 and fire9, 705 against 556 us), 64 -> 256 on 27x27 0.99, 128
-> 128 on 14x14 0.95, 48 -> 192 on 13x13 0.82, 64 -> 64 on 13x13 0.84, 128 -> 32 on 7x7
1.02; each is about 0.78 (weights within 768 KiB) or 0.95 (past it) times the edge
tiles' extra work.
`MDSL_WINOGRAD=0` keeps oneDNN's direct kernel everywhere.
"""

from __future__ import annotations

import math
import os

import numpy as np

from mdsl.codegen import kir, onednn

G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
MIN_CHANNELS = 32
MAX_PAIRS = 128 * 128  # input x output channels: 16 points x 4 bytes each, 1 MiB
POST_OPS = ("relu", "clip", "sum")
LARGE_PAIRS = 96 * 128  # channel pairs past which the transformed weights exceed 768 KiB
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
    (False, False)
    >>> eligible(K(**{**conv, "c": 128, "cout": 128}), nhwc)
    True
    >>> eligible(K(**{**conv, "c": 256, "cout": 128}), nhwc)
    False
    """
    return (
        enabled()
        and (k.kh, k.kw, k.stride, k.dilation, k.pad, k.group) == (3, 3, (1, 1), (1, 1), (1, 1), 1)
        and (k.oh, k.ow) == (k.h, k.w_in)
        and k.c >= MIN_CHANNELS
        and k.c * k.cout <= MAX_PAIRS
        and k.c % 16 == 0
        and k.cout % 16 == 0
        and all(op[0] in POST_OPS for op in k.post_ops)
        and probe.src_layout == probe.dst_layout == "acdb"
        and probe.same_layouts
        and expected_ratio(k) < MAX_EXPECTED_RATIO
    )


def expected_ratio(k: kir.Conv) -> float:
    """Winograd's time over oneDNN's direct kernel for `k`, as measured on a Zen 3 core
    (the module's doc): 0.78, or 0.95 with weights past 768 KiB, times the work of the
    2x2 tiles over the outputs they keep.

    >>> from types import SimpleNamespace as K
    >>> round(expected_ratio(K(c=64, cout=256, oh=13, ow=13)), 2)  # SqueezeNet's fire9
    1.1
    >>> round(expected_ratio(K(c=48, cout=192, oh=13, ow=13)), 2)
    0.9
    >>> round(expected_ratio(K(c=64, cout=64, oh=56, ow=56)), 2)  # ResNet's
    0.78
    """
    tiles = 4 * math.ceil(k.oh / 2) * math.ceil(k.ow / 2)
    base = 0.95 if k.c * k.cout > LARGE_PAIRS else 0.78
    return base * tiles / (k.oh * k.ow)


def transformed_weights(w: np.ndarray) -> np.ndarray:
    """OIHW 3x3 weights as the kernel reads them: u[4 i + j][cin][cout] = (G g G^T)[i, j]
    for each output channel's filter g over each input channel, made in float64.

    >>> w = np.zeros((2, 1, 3, 3), np.float32); w[1, 0, 1, 1] = 1.0  # a centre tap
    >>> transformed_weights(w)[:, 0, 1].reshape(4, 4)
    array([[ 0.  ,  0.  ,  0.  ,  0.  ],
           [ 0.  ,  0.25, -0.25,  0.  ],
           [ 0.  , -0.25,  0.25,  0.  ],
           [ 0.  ,  0.  ,  0.  ,  0.  ]], dtype=float32)
    """
    cout, cin = w.shape[:2]
    u = np.einsum("ak,ockl,bl->abco", G, w.astype(np.float64), G)
    return np.ascontiguousarray(u.reshape(16, cin, cout), dtype=np.float32)
