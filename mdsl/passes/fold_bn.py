"""Folding parameters into the op before them: Conv+BatchNorm, MatMul+Add -> Gemm.

`fold_conv_bn`: a Conv whose only reader is an inference BatchNormalization, with constant
weights, bias and BN parameters, becomes one Conv with W' = W * s (per output channel)
and b' = (b - mean) * s + beta, where s = gamma / sqrt(var + eps). Computed in float64,
stored in the Conv's dtype. A Conv whose only reader multiplies or adds a constant that
is one value per output channel (or one value: Caffe2 exports write a BatchNorm as BN
followed by such a Mul and Add) folds the same way: W' = W * m, b' = b * m, or b' = b + a.
A convolution whose epilogue is then at most bias and ReLU keeps oneDNN's layouts across
layers (docs/cpu-kernels.md). (A zero Pad before a Conv folds into it in `fold_pad.py`.)

`fuse_matmul_add`: MatMul of 2-D operands plus a bias that broadcasts to its (M, N)
output becomes one ONNX Gemm (a BLAS call with beta*C). Higher-rank MatMul + Add (the
`x @ W + b` of a transformer over (batch, seq, features)) stays as it is: the fusion
grouping pass runs the Add as the GEMM's epilogue there, which is as fast and keeps the
graph close to what the user wrote. This pass is written with the user-facing pattern
mechanism (`rewrite_pass`), like any user rewrite.
"""

from __future__ import annotations

import numpy as np

from mdsl import ops
from mdsl.ir.graph import CONST, Graph, Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Match, Pat, PatternMatcher, rewrite_pass


# -- Conv + BatchNormalization --------------------------------------------------------------
def _is_const(t: Tensor | None) -> bool:
    return t is not None and t.producer.op_type == CONST


def _fold_bn_into_conv(m: Match) -> Tensor | None:
    conv, bn = m["conv"].producer, m.root
    x, w, b = conv.inputs
    if not _is_const(w) or (b is not None and not _is_const(b)) or m.uses(m["conv"]) != 1:
        return None
    if bn.attrs.get("training_mode"):
        return None
    new_w, new_b = folded_conv_params(
        w.producer.const_value(),
        None if b is None else b.producer.const_value(),
        *(m[k].producer.const_value() for k in ("scale", "bias", "mean", "var")),
        epsilon=bn.attrs["epsilon"],
    )
    w_t = m.rewriter.const(new_w, like=conv, name="weight_bn_folded")
    b_t = m.rewriter.const(new_b, like=conv, name="bias_bn_folded")
    return m.rewriter.emit("Conv", [x, w_t, b_t], dict(conv.attrs), like=conv).outputs[0]


def _per_channel(value: np.ndarray, out: Tensor) -> np.ndarray | None:
    """`value` as one number per channel of the Conv result `out` when broadcasting it
    against `out` gives each output channel one value and leaves the shape alone."""
    rank, channels = len(out.shape), out.shape[1]
    if value.ndim > rank or not isinstance(channels, int):
        return None
    full = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(full) if i != 1) or full[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1).astype(np.float64), (channels,))


def _fold_affine_into_conv(m: Match) -> Tensor | None:
    """Conv followed by `* k` or `+ k` with k constant per output channel -> one Conv."""
    conv, root = m["conv"].producer, m.root
    x, w, b = conv.inputs
    k = m["k"].producer.const_value()
    per_channel = _per_channel(k, m["conv"])
    if per_channel is None or k.dtype != m["conv"].dtype.np or m.uses(m["conv"]) != 1:
        return None
    if not _is_const(w) or (b is not None and not _is_const(b)):
        return None
    w64 = w.producer.const_value().astype(np.float64)
    b64 = np.zeros(w64.shape[0]) if b is None else b.producer.const_value().astype(np.float64)
    if root.op_type == "Mul":
        w64 = w64 * per_channel.reshape(-1, *(1,) * (w64.ndim - 1))
        b64 = b64 * per_channel
    else:
        b64 = b64 + per_channel
    dtype = w.producer.const_value().dtype
    w_t = m.rewriter.const(w64.astype(dtype), like=conv, name="weight_scaled")
    b_t = m.rewriter.const(b64.astype(dtype), like=conv, name="bias_shifted")
    return m.rewriter.emit("Conv", [x, w_t, b_t], dict(conv.attrs), like=conv).outputs[0]


def folded_conv_params(w, b, scale, bias, mean, var, *, epsilon: float):
    """Weights and bias of a Conv equal to Conv(w, b) followed by BatchNorm."""
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    new_w = w.astype(np.float64) * s.reshape(-1, *(1,) * (w.ndim - 1))
    b64 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    new_b = (b64 - mean.astype(np.float64)) * s + bias.astype(np.float64)
    return new_w.astype(w.dtype), new_b.astype(w.dtype)


CONV_BN_RULES = PatternMatcher(
    [
        (
            Pat(
                "BatchNormalization",
                Pat("Conv", name="conv"),
                Pat.cvar("scale"),
                Pat.cvar("bias"),
                Pat.cvar("mean"),
                Pat.cvar("var"),
            ),
            _fold_bn_into_conv,
        ),
        (Pat("Mul", Pat("Conv", name="conv"), Pat.cvar("k")), _fold_affine_into_conv),
        (Pat("Add", Pat("Conv", name="conv"), Pat.cvar("k")), _fold_affine_into_conv),
    ]
)


@register("fold_conv_bn", levels=(2, 3))
def fold_conv_bn(g: Graph) -> PassResult:
    """Fold inference BatchNormalization, and Mul / Add of a constant per output
    channel, into the Conv before it (constant params).

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (1, 2, 4, 4))
    ...     y = mdsl.ops.conv2d(x, mdsl.param("w", (3, 2, 3, 3)), pads=1)
    ...     p = [mdsl.param(n, (3,), init="ones") for n in ("g", "b", "m", "v")]
    ...     g.output(mdsl.ops.batch_norm(y, *p), "y")
    >>> [n.op_type for n in mdsl.passes.run(g, ["fold_conv_bn", "dce"]).nodes]
    ['Input', 'Const', 'Const', 'Conv', 'Output']
    """
    count = CONV_BN_RULES.sweep(g)
    return PassResult(
        g,
        count > 0,
        f"folded {count} BatchNormalization / per-channel Mul / Add node(s) into Conv",
    )


# -- MatMul + Add -> Gemm -------------------------------------------------------------------
def _matmul_plus_bias(a, b, c):
    return ops.add(ops.matmul(a, b), c)


def _gemm_fits(m: Match) -> bool:
    """2-D operands, a bias of rank <= 2, dtypes Gemm takes (the engine also checks the
    Gemm's type equals the Add's, so a bias widening the output is left alone)."""
    kinds = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
    return m.a.ndim == 2 and m.b.ndim == 2 and m.c.ndim <= 2 and m.a.dtype.value in kinds


def _gemm(a, b, c):
    return ops.gemm(a, b, c)


_MATMUL_ADD = rewrite_pass(
    "fuse_matmul_add",
    _matmul_plus_bias,
    _gemm,
    _gemm_fits,
    types={
        "a": TensorType(("M", "K")),
        "b": TensorType(("K", "N")),
        "c": TensorType(("N",)),
    },
    levels=(2, 3),
)
fuse_matmul_add = _MATMUL_ADD.pass_fn

__all__ = ["CONV_BN_RULES", "fold_conv_bn", "folded_conv_params", "fuse_matmul_add"]
