"""Folding a zero Pad into the Conv that reads it.

A zero constant Pad of the spatial dims before a Conv (how TensorFlow-style "same"
padding is exported, e.g. Hugging Face's MobileNetV2, and how Hugging Face's EfficientNet
pads before each stride-2 depthwise convolution) becomes the Conv's own padding: no padded
copy, and the tensor before it may stay in oneDNN's layout (docs/cpu-kernels.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from mdsl.ir.graph import Graph, Node, Tensor
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Match, Pat, PatternMatcher


def _is_zero_constant_pad(pad: Node) -> bool:
    return (
        len(pad.inputs) == 1
        and pad.attrs.get("mode", "constant") == "constant"
        and pad.attrs.get("constant_value", 0.0) == 0.0
    )


def _pad_begins_ends(pad: Node, rank: int) -> tuple[list[int], list[int]]:
    """The Pad's begin and end padding per dim of its input, 0 where `axes` omits it."""
    axes = pad.attrs.get("axes")
    axes = range(rank) if axes is None else [a % rank for a in axes]
    begins, ends = [0] * rank, [0] * rank
    pads = list(pad.attrs["pads"])
    for i, a in enumerate(axes):
        begins[a], ends[a] = pads[i], pads[i + len(pads) // 2]
    return begins, ends


def _grown_pads(own: Sequence[int], begins: list[int], ends: list[int]) -> tuple[int, ...]:
    """The Conv's pads (begins then ends of the spatial dims) plus the Pad's."""
    spatial = len(begins) - 2
    grown = [own[i] + begins[2 + i] for i in range(spatial)]
    grown += [own[spatial + i] + ends[2 + i] for i in range(spatial)]
    return tuple(grown)


def _fold_pad_into_conv(m: Match) -> Tensor | None:
    """Conv(Pad(x)) with zero constant padding of the spatial dims -> Conv(x), its pads
    grown by the Pad's."""
    conv, pad = m.root, m["padded"].producer
    x = pad.inputs[0]
    # VALID means the Conv has no padding of its own
    if not _is_zero_constant_pad(pad) or conv.attrs.get("auto_pad", "NOTSET") not in (
        "NOTSET",
        "VALID",
    ):
        return None
    begins, ends = _pad_begins_ends(pad, len(x.shape))
    if any(begins[:2] + ends[:2]) or min(begins + ends) < 0:
        return None
    own = conv.attrs.get("pads") or (0,) * (2 * (len(x.shape) - 2))
    attrs = dict(conv.attrs, pads=_grown_pads(own, begins, ends), auto_pad="NOTSET")
    return m.rewriter.emit("Conv", [x, *conv.inputs[1:]], attrs, like=conv).outputs[0]


PAD_INTO_CONV_RULES = PatternMatcher(
    [
        (Pat("Conv", Pat("Pad", name="padded"), Pat.var("w"), None), _fold_pad_into_conv),
        (
            Pat("Conv", Pat("Pad", name="padded"), Pat.var("w"), Pat.var("b")),
            _fold_pad_into_conv,
        ),
    ]
)


@register("fold_pad_into_conv", levels=(2, 3))
def fold_pad_into_conv(g: Graph) -> PassResult:
    """Fold a zero constant Pad of the spatial dims into the Conv that reads it.

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (1, 2, 4, 4))
    ...     padded = mdsl.ops.pad(x, pads=(0, 0, 1, 1, 0, 0, 1, 1))
    ...     g.output(mdsl.ops.conv2d(padded, mdsl.param("w", (3, 2, 3, 3))), "y")
    >>> g2 = mdsl.passes.run(g, ["fold_pad_into_conv", "dce"])
    >>> [n.op_type for n in g2.nodes], g2.nodes[-2].attrs["pads"]
    (['Input', 'Const', 'Conv', 'Output'], (1, 1, 1, 1))
    """
    count = PAD_INTO_CONV_RULES.sweep(g)
    return PassResult(g, count > 0, f"folded {count} zero Pad node(s) into Conv")


__all__ = ["PAD_INTO_CONV_RULES", "fold_pad_into_conv"]
