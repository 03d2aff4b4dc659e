"""The discrete Fourier transform along one axis (ONNX DFT), forward and inverse, of
complex or real signals, with its one-sided (real-input) forms.

Complex values are held as a last axis of 2 (real, imaginary); a real signal has a last
axis of 1. `axis` counts that last axis too (ONNX's convention; -2 is the axis before
it). `dft_length` pads the signal with zeros or truncates it (0: the axis's size).
Forward with `onesided` keeps the first n // 2 + 1 frequencies (the others mirror them
for a real signal); inverse with `onesided` is the inverse real transform: one-sided
frequencies in, a real signal of n = 2 * (frequencies - 1) values (or `dft_length`) out.
The inverse scales by 1 / n. The "c" binding (`spectral.c`) computes the same sums
directly (O(n^2) per transform, in double).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, check


def dft_geometry(shape, *, axis, inverse, onesided, dft_length):
    """(axis as a positive index, the transform's length n, the output's axis size, the
    output's last dim) of a DFT of a signal of `shape`."""
    rank = len(shape)
    axis = axis + rank if axis < 0 else axis
    check(0 <= axis < rank - 1, f"DFT axis {axis} must be a signal axis of {tuple(shape)}")
    check(shape[-1] in (1, 2), f"DFT needs a last axis of 1 (real) or 2 (complex), got {shape}")
    size = shape[axis]
    check(dft_length >= 0, f"DFT dft_length must be positive, got {dft_length}")
    if inverse and onesided:
        n = dft_length or 2 * (size - 1)
        return axis, n, n, 1
    n = dft_length or size
    return axis, n, (n // 2 + 1 if onesided else n), 2


@op_proto(
    "DFT",
    inputs={"x": "float"},
    outputs={"y": "float"},
    attrs={
        "axis": Attr(int, default=-2),
        "inverse": Attr(int, default=0, choices=(0, 1)),
        "onesided": Attr(int, default=0, choices=(0, 1)),
        "dft_length": Attr(int, default=0),
    },
    category="opaque",
)
def dft(x, *, axis, inverse, onesided, dft_length):
    """The DFT of x (..., n, ..., 1 or 2: real or complex) along `axis` (ONNX DFT).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(mdsl.ops.dft(g.input("x", (1, 4, 1)), axis=1), "y")
    >>> mdsl.interpret(g, {"x": np.array([1, 2, 3, 4], np.float32).reshape(1, 4, 1)})["y"][0]
    array([[10.,  0.],
           [-2.,  2.],
           [-2.,  0.],
           [-2., -2.]], dtype=float32)
    """
    check(all(isinstance(d, int) for d in x.shape), f"DFT needs static dims, got {x.shape}")
    axis, _, out_size, last = dft_geometry(
        x.shape, axis=axis, inverse=inverse, onesided=onesided, dft_length=dft_length
    )
    shape = list(x.shape)
    shape[axis], shape[-1] = out_size, last
    return TensorType(tuple(shape), x.dtype)


def _dft_ref(x, *, axis, inverse, onesided, dft_length):
    axis, n, _, _ = dft_geometry(
        x.shape, axis=axis, inverse=inverse, onesided=onesided, dft_length=dft_length
    )
    # in x's precision (single for float32), as numpy's own fft computes
    wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
    signal = wide[..., 0] if x.shape[-1] == 1 else wide[..., 0] + 1j * wide[..., 1]
    if inverse and onesided:
        return np.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
    result = (np.fft.ifft if inverse else np.fft.fft)(signal, n=n, axis=axis)
    if onesided:
        result = np.take(result, np.arange(n // 2 + 1), axis=axis)
    return np.stack([result.real, result.imag], axis=-1).astype(x.dtype)


register_op_impl("DFT", _dft_ref)

C_SOURCE = Path(__file__).with_name("spectral.c").read_text()
register_op_impl("DFT", backend="c", source=C_SOURCE, symbol="spectral_dft")
