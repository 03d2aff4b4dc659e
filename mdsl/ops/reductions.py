"""What a reduction op reduces and how a row kernel computes it, declared with the op
(`op_proto(..., reduction=Reduction(...))`); fusion reads the axes, the row lowering the
rule, and neither keeps a table of op types.

A row rule is `rule(prog, node) -> Expr`: it describes one row of the reduced axes with
`prog.vector(tensor)` (an input, per row element; `axis=` for a vector along one axis), `prog.reduce(op, value, dtype)` ("sum",
"max", "min", "prod" over the row: a per-row scalar), `prog.let(value, dtype)` (a per-row
scalar named once) and `prog.row_count(dtype)` (the row size as a value), all
`mdsl.expr` expressions (`mdsl.codegen.lower_rows.RowProgram` is the `prog`).

>>> Reduction(spatial_axes).axes({}, 4)
(2, 3)
>>> axes_attr({"axes": [-1]}, 3), axis_attr({"axis": 1}, 3), tuple(trailing_axes({"axis": -2}, 4))
((2,), (1,), (2, 3))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mdsl import expr as E
from mdsl.ops.shape_rules import normalize_axes, normalize_axis


# -- reduced axes: (attrs, rank) -> axes ------------------------------------------------------
def axes_attr(attrs: dict, rank: int):
    """The `axes` attr (None: every axis): ReduceSum and its family."""
    given = attrs["axes"]
    return range(rank) if given is None else normalize_axes(given, rank)


def axis_attr(attrs: dict, rank: int):
    """The one axis of the `axis` attr: Softmax, ArgMax."""
    return (normalize_axis(attrs["axis"], rank),)


def trailing_axes(attrs: dict, rank: int):
    """Every axis from the `axis` attr on (ONNX LayerNormalization)."""
    return range(normalize_axis(attrs.get("axis", -1), rank), rank)


def spatial_axes(attrs: dict, rank: int):
    """Every axis after N and C (the global pools)."""
    return range(2, rank)


def attr_axes(attrs: dict, rank: int):
    """The axes of a reduction that declares none: its `axes` or int `axis` attr."""
    if "axes" in attrs:
        return axes_attr(attrs, rank)
    if "axis" in attrs and isinstance(attrs["axis"], int):
        return axis_attr(attrs, rank)
    raise TypeError("no known reduced axes")


@dataclass(frozen=True, slots=True)
class Reduction:
    """`reduced(attrs, rank)`: the axes a node reduces of an input of that rank; `row`: its
    row rule (None: no row form, compiled targets call the numpy reference);
    `per_element`: the rule's value is one per row element (Softmax), not one per row."""

    reduced: Callable = attr_axes
    row: Callable | None = None
    per_element: bool = False

    def axes(self, attrs: dict, rank: int) -> tuple[int, ...]:
        return tuple(sorted(self.reduced(attrs, rank)))


# -- row rules ------------------------------------------------------------------------------
def reduce_rule(op: str, pre=None, post=None):
    """`op` over `pre(x)` (x when None), then `post(result, row count)` when given."""

    def rule(prog, node):
        x = prog.vector(node.inputs[0])
        value = x if pre is None else pre(x)
        dtype = node.outputs[0].dtype
        r = prog.reduce(op, value, dtype)
        return r if post is None else prog.let(post(r, prog.row_count(dtype)), dtype)

    return rule


def reciprocal(n):
    """1 / the row count; inf for an empty row, so its mean is 0 * inf = NaN (ONNX)."""
    if isinstance(n, float):
        return 1.0 / n if n else float("inf")
    return 1.0 / n


def mean(total, n):
    """A row's sum over its count (a `reduce_rule` post)."""
    return total * reciprocal(n)


def log_sum_exp_rule(prog, node):
    x = prog.vector(node.inputs[0])
    dt = node.outputs[0].dtype
    m = prog.reduce("max", x, dt)
    s = prog.reduce("sum", E.exp(x - m), dt)
    return prog.let(m + E.log(s), dt)


def l2_norm_rule(prog, node):
    """sqrt(sum(x * x)) scaled by the largest |x| (BLAS nrm2's idea): it neither
    overflows nor underflows where the norm itself is representable."""
    x = prog.vector(node.inputs[0])
    dt = node.outputs[0].dtype
    inf = float("inf")
    peak = prog.let(E.max(prog.reduce("max", E.abs(x), dt), 0.0), dt)  # 0 for an empty row
    finite = E.logical_and(peak > 0.0, peak < inf)
    inv = prog.let(E.select(finite, 1.0 / peak, 0.0), dt)
    total = prog.reduce("sum", (x * inv) * (x * inv), dt)
    return prog.let(E.select(peak < inf, peak * E.sqrt(total), peak), dt)  # inf, NaN: peak


def softmax_rule(log: bool):
    def rule(prog, node):
        x = prog.vector(node.inputs[0])
        dt = node.outputs[0].dtype
        m = prog.reduce("max", x, dt)
        e = E.exp(x - m)  # one node in both phases: a target may store it and read it back
        s = prog.reduce("sum", e, dt)
        if log:
            return x - (m + E.log(s))
        inv = prog.let(1.0 / s, dt)
        return e * inv

    return rule


def _standardized(prog, node):
    """(x - mean) / sqrt(var + epsilon) over the row (the population variance)."""
    x = prog.vector(node.inputs[0])
    dt = node.outputs[0].dtype
    n = prog.row_count(dt)
    mean = prog.let(prog.reduce("sum", x, dt) * reciprocal(n), dt)
    var = prog.let(prog.reduce("sum", (x - mean) * (x - mean), dt) * reciprocal(n), dt)
    inv = prog.let(E.rsqrt(var + float(node.attrs["epsilon"])), dt)
    return (x - mean) * inv


def layer_norm_rule(prog, node):
    y = _standardized(prog, node) * prog.vector(node.inputs[1])
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        y = y + prog.vector(node.inputs[2])
    return y


def instance_norm_rule(prog, node):
    """Rows are the spatial axes; scale and bias are per channel (axis 1, a kept axis)."""
    scale, bias = (prog.vector(t, axis=1) for t in node.inputs[1:3])
    return _standardized(prog, node) * scale + bias
