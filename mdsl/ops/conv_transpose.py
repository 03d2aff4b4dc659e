"""Transposed convolution (ONNX ConvTranspose), 1-D to 3-D, with groups, dilations,
pads, output_padding, output_shape and auto_pad.

x is (N, C, D1, ...), w is (C, M/group, k1, ...): each input element scatters its
kernel, scaled, onto the output at stride spacing. Along each spatial axis the output
size is `stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin -
pad_end`; with `output_shape` (or auto_pad SAME_*, which asks for `in * stride`) the
pads follow from the size asked for, the odd one at the end for SAME_UPPER and at the
beginning otherwise, as ONNX specifies.
"""

from __future__ import annotations

import itertools

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.family import same_dtype
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, In, check

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _per_axis(value, n: int, default: int, what: str) -> tuple[int, ...]:
    if value is None or len(value) == 0:
        return (default,) * n
    check(len(value) == n, f"ConvTranspose {what} needs {n} values, got {tuple(value)}")
    return tuple(int(v) for v in value)


def resolved_geometry(
    in_sizes, kernel, *, strides, dilations, pads, output_padding, output_shape, auto_pad
):
    """(strides, dilations, pads (begins..., ends...), output sizes) of every axis."""
    n = len(kernel)
    strides = _per_axis(strides, n, 1, "strides")
    dilations = _per_axis(dilations, n, 1, "dilations")
    extra = _per_axis(output_padding, n, 0, "output_padding")
    for s, e in zip(strides, extra):
        check(
            0 <= e < s or (e == 0 and s == 1),
            f"ConvTranspose output_padding {extra} must be below strides {strides}",
        )
    full = [
        s * (i - 1) + e + (k - 1) * d + 1
        for i, s, e, k, d in zip(in_sizes, strides, extra, kernel, dilations)
    ]
    wanted = None
    if output_shape:
        wanted = _per_axis(output_shape, n, 0, "output_shape")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = tuple(i * s for i, s in zip(in_sizes, strides))
    if wanted is not None:
        totals = [f - w for f, w in zip(full, wanted)]
        upper = auto_pad == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        pads = (*begins, *(t - b for t, b in zip(totals, begins)))
    elif auto_pad == "VALID" or not pads:
        pads = (0,) * (2 * n)
    check(len(pads) == 2 * n, f"ConvTranspose pads needs {2 * n} values, got {tuple(pads)}")
    outs = tuple(f - pads[a] - pads[n + a] for a, f in enumerate(full))
    check(all(o >= 1 for o in outs), f"ConvTranspose output size {outs} must be positive")
    return strides, dilations, tuple(int(p) for p in pads), outs


@op_proto(
    "ConvTranspose",
    inputs={"x": "float", "w": "float", "b": In("float", optional=True)},
    outputs={"y": "float"},
    attrs={
        "auto_pad": Attr(str, default="NOTSET", choices=AUTO_PADS),
        "dilations": Attr([int], default=None),
        "group": Attr(int, default=1),
        "kernel_shape": Attr([int], default=None),
        "output_padding": Attr([int], default=None),
        "output_shape": Attr([int], default=None),
        "pads": Attr([int], default=None),
        "strides": Attr([int], default=None),
    },
    category="extern",
)
def _conv_transpose(
    x,
    w,
    b,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    output_padding,
    output_shape,
    pads,
    strides,
):
    """Transposed convolution (ONNX ConvTranspose)."""
    same_dtype("ConvTranspose", x, w, b)
    check(3 <= x.rank <= 5, f"ConvTranspose takes (N, C, D1[, D2[, D3]]), got {x.shape}")
    check(w.rank == x.rank, f"w must have rank {x.rank} like x, got shape {w.shape}")
    spatial = x.shape[2:]
    for d in (*spatial, *w.shape, x.shape[1]):
        check(
            not isinstance(d, Dim),
            f"ConvTranspose needs static channels and spatial sizes, got {x.shape}, {w.shape}",
        )
    kernel = w.shape[2:]
    if kernel_shape:
        check(tuple(kernel_shape) == kernel, f"kernel_shape {kernel_shape} != w's {kernel}")
    check(
        group >= 1 and x.shape[1] % group == 0,
        f"group={group} must divide the {x.shape[1]} input channels",
    )
    check(w.shape[0] == x.shape[1], f"w has {w.shape[0]} input channels, x {x.shape[1]}")
    out_channels = w.shape[1] * group
    if b is not None:
        check(b.shape == (out_channels,), f"bias must have shape ({out_channels},), got {b.shape}")
    *_, outs = resolved_geometry(
        spatial,
        kernel,
        strides=strides,
        dilations=dilations,
        pads=pads,
        output_padding=output_padding,
        output_shape=output_shape,
        auto_pad=auto_pad,
    )
    return TensorType((x.shape[0], out_channels, *outs), x.dtype)


def conv_transpose(
    x,
    w,
    b=None,
    *,
    strides=(),
    pads=(),
    dilations=(),
    group: int = 1,
    output_padding=(),
    output_shape=(),
    auto_pad: str = "NOTSET",
    name=None,
) -> Tensor:
    """Transposed convolution of x (N, C, D...) with w (C, M/group, k...) (ONNX
    ConvTranspose; torch's conv_transpose1d/2d/3d with `pads=padding` on both sides).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (1, 4, 5, 5))
    ...     y = mdsl.ops.conv_transpose(x, mdsl.param("w", (4, 2, 3, 3)), strides=(2, 2),
    ...                                 pads=(1, 1, 1, 1), output_padding=(1, 1))
    ...     g.output(y, "y")
    >>> y.shape
    (1, 2, 10, 10)
    """
    return _conv_transpose(
        x,
        w,
        b,
        strides=strides,
        pads=pads,
        dilations=dilations,
        group=group,
        output_padding=output_padding,
        output_shape=output_shape,
        auto_pad=auto_pad,
        name=name,
    )


def _conv_transpose_ref(
    x,
    w,
    b=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    output_padding,
    output_shape,
    pads,
    strides,
):
    n_axes = x.ndim - 2
    kernel = w.shape[2:]
    strides, dilations, pads, outs = resolved_geometry(
        x.shape[2:],
        kernel,
        strides=strides,
        dilations=dilations,
        pads=pads,
        output_padding=output_padding,
        output_shape=output_shape,
        auto_pad=auto_pad,
    )
    batch, channels = x.shape[:2]
    per_group_in, per_group_out = channels // group, w.shape[1]
    full = [
        max(s * (i - 1) + (k - 1) * d + 1, p + o)
        for i, s, k, d, p, o in zip(x.shape[2:], strides, kernel, dilations, pads, outs)
    ]
    y = np.zeros((batch, group, per_group_out, *full), np.float64)
    xg = x.reshape(batch, group, per_group_in, *x.shape[2:]).astype(np.float64)
    wg = w.reshape(group, per_group_in, per_group_out, *kernel).astype(np.float64)
    for offset in itertools.product(*(range(k) for k in kernel)):
        tap = wg[(slice(None), slice(None), slice(None), *offset)]  # (group, Cg, Mg)
        contribution = np.einsum("ngc...,gcm->ngm...", xg, tap)
        at = tuple(
            slice(o * d, o * d + s * (i - 1) + 1, s)
            for o, d, s, i in zip(offset, dilations, strides, x.shape[2:])
        )
        y[(slice(None), slice(None), slice(None), *at)] += contribution
    y = y.reshape(batch, group * per_group_out, *full)
    crop = tuple(slice(pads[a], pads[a] + outs[a]) for a in range(n_axes))
    y = y[(slice(None), slice(None), *crop)]
    if b is not None:
        y = y + b.reshape(-1, *(1,) * n_axes)
    return np.ascontiguousarray(y).astype(x.dtype)


register_op_impl("ConvTranspose", _conv_transpose_ref)
