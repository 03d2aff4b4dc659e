"""Einstein summation (ONNX Einsum): the equation is an attribute, operands are inputs.

Labels are single letters; "..." stands for broadcast dims; without "->" the output holds
the labels used exactly once, in alphabetical order, after the broadcast dims (numpy's
implicit mode). Dims of one label must agree across operands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.family import same_dtype
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, In, check
from mdsl.ops.shape_rules import broadcast_shapes, unify_dims

ELLIPSIS = "..."


@dataclass(frozen=True, slots=True)
class EinsumSpec:
    """A parsed equation: each operand's labels and the output's (ELLIPSIS kept as is)."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]


def parse_equation(equation: str, n_operands: int) -> EinsumSpec:
    """Parse "ij,jk->ik" (or implicit "ij,jk") into labels per operand and output.

    >>> parse_equation("bij,bjk->bik", 2).output
    ('b', 'i', 'k')
    >>> parse_equation("ij,jk", 2).output
    ('i', 'k')
    """
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    check(
        len(terms) == n_operands,
        f"equation {equation!r} names {len(terms)} operands, got {n_operands}",
    )
    inputs = tuple(_labels(t, equation) for t in terms)
    output = _labels(rhs, equation) if arrow else _implicit_output(inputs)
    check(len(set(output)) == len(output), f"equation {equation!r} repeats an output label")
    known = {label for term in inputs for label in term}
    for label in output:
        check(label in known, f"output label {label!r} of {equation!r} is in no operand")
    return EinsumSpec(inputs, output)


def _labels(term: str, equation: str) -> tuple[str, ...]:
    check(term.count(ELLIPSIS) <= 1, f"term {term!r} of {equation!r} has more than one '...'")
    before, dots, after = term.partition(ELLIPSIS)
    letters = before + after
    check(
        all(c.isascii() and c.isalpha() for c in letters),
        f"term {term!r} of {equation!r} must hold letters and at most one '...'",
    )
    return (*before, *((ELLIPSIS,) if dots else ()), *after)


def _implicit_output(inputs) -> tuple[str, ...]:
    counts: dict[str, int] = {}
    for term in inputs:
        for label in term:
            counts[label] = counts.get(label, 0) + 1
    singles = sorted(lb for lb, n in counts.items() if n == 1 and lb != ELLIPSIS)
    has_ellipsis = any(ELLIPSIS in term for term in inputs)
    return ((ELLIPSIS,) if has_ellipsis else ()) + tuple(singles)


@op_proto(
    "Einsum",
    inputs={"Inputs": In("numeric", variadic=True)},
    outputs={"Output": "numeric"},
    attrs={"equation": Attr(str)},
    category="extern",
)
def _einsum(*operands, equation):
    """Sum of products over the labels missing from the output (ONNX Einsum)."""
    same_dtype("Einsum", *operands)
    spec = parse_equation(equation, len(operands))
    sizes: dict[str, object] = {}
    batch_shapes = []
    for i, (labels, t) in enumerate(zip(spec.inputs, operands)):
        batch_shapes.append(_bind_labels(labels, t, i, sizes, equation))
    batch = broadcast_shapes(*batch_shapes)
    shape = []
    for label in spec.output:
        shape.extend(batch if label == ELLIPSIS else (sizes[label],))
    return TensorType(tuple(shape), operands[0].dtype)


def _bind_labels(labels, t: TensorType, index: int, sizes: dict, equation: str) -> tuple:
    """Record each label's dim in `sizes`; return the dims "..." covers in this operand."""
    named = len(labels) - (ELLIPSIS in labels)
    check(
        t.rank == named if ELLIPSIS not in labels else t.rank >= named,
        f"operand {index} of {equation!r} has rank {t.rank}, its term has {named} labels",
    )
    n_batch = t.rank - named
    dims = list(t.shape)
    batch = ()
    for label in labels:
        if label == ELLIPSIS:
            batch, dims = tuple(dims[:n_batch]), dims[n_batch:]
            continue
        d = dims.pop(0)
        where = f"label {label!r} of {equation!r} (operand {index})"
        sizes[label] = unify_dims(sizes[label], d, where) if label in sizes else d
    return batch


def einsum(equation: str, *operands, name: str | None = None) -> Tensor:
    """Einstein summation as numpy.einsum / torch.einsum spell it (ONNX Einsum).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     q, k = g.input("q", ("B", "T", 64)), g.input("k", ("B", "S", 64))
    ...     scores = mdsl.ops.einsum("btd,bsd->bts", q, k)
    ...     g.output(scores, "scores")
    >>> scores.shape
    (Dim('B'), Dim('T'), Dim('S'))
    """
    return _einsum(list(operands), equation=equation, name=name)


def _einsum_ref(*operands, equation):
    dtype = operands[0].dtype
    wide = [
        o.astype(np.float64) if o.dtype.kind == "f" or o.dtype.name == "bfloat16" else o
        for o in operands
    ]
    return np.asarray(np.einsum(equation.replace(" ", ""), *wide)).astype(dtype)


register_op_impl("Einsum", _einsum_ref)
