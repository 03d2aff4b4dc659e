"""Cases for DFT, checked against torch.fft: complex and real signals, forward and
inverse, one-sided forms, dft_length padding and truncating, axes counted both ways."""

from __future__ import annotations

import torch

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

COMPLEX = rand(2, 8, 3, 2)
REAL = rand(2, 7, 1)
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _complex(x):
    return torch.view_as_complex(x.contiguous())


CASES = [
    OpCase(
        "DFT",
        lambda x: ops.dft(x, axis=1),
        {"x": COMPLEX},
        lambda x: torch.view_as_real(torch.fft.fft(_complex(x), dim=1)),
        id="complex",
        **TOL,
    ),
    OpCase(
        "DFT",
        lambda x: ops.dft(x, axis=-2, inverse=1, dft_length=6),
        {"x": COMPLEX},
        lambda x: torch.view_as_real(torch.fft.ifft(_complex(x), n=6, dim=2)),
        id="inverse-truncated",
        **TOL,
    ),
    OpCase(
        "DFT",
        lambda x: ops.dft(x, axis=1, onesided=1, dft_length=10),
        {"x": REAL},
        lambda x: torch.view_as_real(torch.fft.rfft(x[..., 0], n=10, dim=1)),
        id="rfft-padded",
        **TOL,
    ),
    OpCase(
        "DFT",
        lambda x: ops.dft(x, axis=0, inverse=1, onesided=1),
        {"x": rand(5, 3, 2, dtype="float64")},
        lambda x: torch.fft.irfft(_complex(x), dim=0)[..., None],
        id="irfft-float64",
    ),
    OpCase(
        "DFT",
        lambda x: ops.dft(x, axis=1, inverse=1, onesided=1, dft_length=7),
        {"x": rand(1, 4, 2)},
        lambda x: torch.fft.irfft(_complex(x), n=7, dim=1)[..., None],
        id="irfft-odd",
        **TOL,
    ),
    OpCase(
        "DFT",
        lambda x: ops.dft(x, axis=1),
        {"x": rand(2, 4, 3)},
        raises=mdsl.ShapeError,
        id="last-axis-3",
    ),
    OpCase(
        "DFT",
        lambda x: ops.dft(x, axis=-1),
        {"x": COMPLEX},
        raises=mdsl.ShapeError,
        id="axis-is-the-complex-axis",
    ),
]
