"""`group_norm_as_instance_norm`: GroupNormalization as the InstanceNormalization of x
viewed as (N, groups, C / groups * spatial), then the per-channel scale and shift.

The statistics of a group are those of one row of that view, which is what
InstanceNormalization (unit scale, zero bias) computes; compiled targets run it as a row
kernel instead of GroupNormalization's numpy binding, and the scale and shift fuse into
the pointwise kernel after it. Diffusion U-Nets and wav2vec2's front end use the op.
"""

from __future__ import annotations

import math

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.graph import Graph, Tensor
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Match, Pat, PatternMatcher


def _as_instance_norm(m: Match) -> Tensor | None:
    node = m.root
    x, scale, bias = node.inputs
    channels, spatial = x.shape[1], tuple(x.shape[2:])
    if x.dtype != DType.float32 or any(isinstance(d, Dim) for d in (channels, *spatial)):
        return None  # (other dtypes: the binding computes the scale and shift in float32)
    groups = node.attrs["num_groups"]
    row = channels // groups * math.prod(spatial)
    rows = m.emit("Reshape", [x], {"shape": (-1, groups, row)})
    unit = m.const(np.ones(groups, x.dtype.np), name="unit_scale")
    zero = m.const(np.zeros(groups, x.dtype.np), name="zero_bias")
    normalized = m.emit(
        "InstanceNormalization", [rows, unit, zero], {"epsilon": node.attrs["epsilon"]}
    )
    y = m.emit("Reshape", [normalized], {"shape": (-1, channels, *spatial)})
    per_channel = (channels, *(1,) * len(spatial))
    y = m.emit("Mul", [y, m.emit("Reshape", [scale], {"shape": per_channel})])
    return m.emit("Add", [y, m.emit("Reshape", [bias], {"shape": per_channel})])


RULES = PatternMatcher([(Pat("GroupNormalization"), _as_instance_norm)])


@register("group_norm_as_instance_norm", levels=(2, 3))
def group_norm_as_instance_norm(g: Graph) -> PassResult:
    """Rewrite float32 GroupNormalization over static channels and spatial sizes as an
    InstanceNormalization of the grouped view, scaled and shifted per channel.

    >>> import mdsl
    >>> with mdsl.Graph("gn") as g:
    ...     x = g.input("x", ("N", 8, 4, 4))
    ...     s, b = mdsl.param("s", (8,)), mdsl.param("b", (8,))
    ...     g.output(mdsl.ops.group_norm(x, s, b, num_groups=2), "y")
    >>> ops = {n.op_type for n in mdsl.passes.run(g, ["group_norm_as_instance_norm", "dce"])}
    >>> "GroupNormalization" in ops, "InstanceNormalization" in ops
    (False, True)
    """
    count = RULES.sweep(g)
    return PassResult(g, count > 0, f"rewrote {count} GroupNormalization(s)")
