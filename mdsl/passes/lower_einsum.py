"""Einsum as the ops compiled targets generate code for: Transpose, Reshape, MatMul,
ReduceSum (and Mul with an identity mask for a repeated label, a diagonal).

`lower_einsum` rewrites each Einsum node in four steps, numpy's einsum order:

1. a label repeated within an operand ("ii", a diagonal) keeps the elements where its
   indices agree: the operand times an identity mask, summed over the second index;
2. a label only one operand has and the output lacks is summed out (ReduceSum);
3. operands are contracted left to right, two at a time, as one batched MatMul: labels
   both have and a later operand or the output needs are batch dims, labels both have
   and nothing later needs are contracted (the K of the MatMul), the others are each
   side's rows (M) and columns (N); each side is transposed to (batch, M, K) and
   (batch, K, N) and reshaped to three groups;
4. the result is transposed to the output's label order.

"..." stands for as many labels as its broadcast dims, aligned from the right; batch dims
of size 1 broadcast as MatMul's do. An Einsum the steps cannot take keeps its node (the
compiled targets then call its numpy reference): a symbolic dim merged with another
(M, K or N of two or more labels), a repeated label of symbolic size, a contracted label
whose sizes differ between the operands (one of them broadcast), and a contraction of
other than float32 or float64 (the MatMul would not reach BLAS either, and the Einsum's
reference sums in float64).

>>> import mdsl
>>> with mdsl.Graph("attention_scores") as g:
...     q, k = g.input("q", (2, 5, 8)), g.input("k", (2, 7, 8))
...     g.output(mdsl.ops.einsum("btd,bsd->bts", q, k), "scores")
>>> [n.op_type for n in mdsl.passes.run(g, ["lower_einsum"]).nodes]
['Input', 'Input', 'Transpose', 'MatMul', 'Output']
"""

from __future__ import annotations

import math

import numpy as np

from mdsl import ops
from mdsl.ir.dtype import DType
from mdsl.ir.errors import MdslError
from mdsl.ir.graph import Graph, Node, Tensor
from mdsl.ir.rewrite import all_graphs
from mdsl.ops.contraction import ELLIPSIS, parse_equation
from mdsl.passes.manager import PassResult, register
from mdsl.passes.pattern import Rewriter

MATMUL_DTYPES = (DType.float32, DType.float64)


class _Decline(Exception):
    """This Einsum keeps its node (see the module doc)."""


class _Term:
    """A tensor with one label per axis."""

    def __init__(self, tensor: Tensor, labels: list[str]):
        self.tensor, self.labels = tensor, labels

    def size(self, label: str):
        return self.tensor.shape[self.labels.index(label)]


def _expanded(labels, rank: int, batch_rank: int | None = None) -> list[str]:
    """`labels` with "..." replaced by one label per broadcast dim ("...0" the last)."""
    if ELLIPSIS not in labels:
        return list(labels)
    n = batch_rank if batch_rank is not None else rank - (len(labels) - 1)
    at = labels.index(ELLIPSIS)
    dots = [f"{ELLIPSIS}{i}" for i in reversed(range(n))]
    return [*labels[:at], *dots, *labels[at + 1 :]]


def _transposed(term: _Term, order: list[str]) -> _Term:
    perm = [term.labels.index(label) for label in order]
    if perm == list(range(len(perm))):
        return _Term(term.tensor, order)
    return _Term(ops.transpose(term.tensor, perm=perm), order)


def _reshaped(t: Tensor, shape: tuple) -> Tensor:
    return t if tuple(t.shape) == tuple(shape) else ops.reshape(t, shape=shape)


def _summed(term: _Term, labels: list[str]) -> _Term:
    if not labels:
        return term
    axes = [term.labels.index(label) for label in labels]
    kept = [label for label in term.labels if label not in labels]
    return _Term(ops.reduce_sum(term.tensor, axes=axes, keepdims=False), kept)


def _diagonal(term: _Term) -> _Term:
    """Step 1: each repeated label kept once, on the elements where its indices agree."""
    while len(set(term.labels)) < len(term.labels):
        label = next(lb for lb in term.labels if term.labels.count(lb) > 1)
        first = term.labels.index(label)
        second = term.labels.index(label, first + 1)
        n = term.tensor.shape[first]
        if not isinstance(n, int):
            raise _Decline
        shape = [1] * len(term.labels)
        shape[first] = shape[second] = n
        mask = np.eye(n, dtype=term.tensor.dtype.np).reshape(shape)
        masked = ops.mul(term.tensor, mask)
        labels = [*term.labels[:second], f"{label}#", *term.labels[second + 1 :]]
        term = _summed(_Term(masked, labels), [f"{label}#"])
    return term


def _product(dims) -> int:
    if len(dims) == 1:
        return dims[0]
    if not all(isinstance(d, int) for d in dims):
        raise _Decline
    return math.prod(dims)


def _broadcast(a, b):
    return b if a == 1 else a


def _contract(a: _Term, b: _Term, keep: set[str]) -> _Term:
    """Step 3: a and b as one batched MatMul."""
    batch = [lb for lb in a.labels if lb in b.labels and lb in keep]
    inner = [lb for lb in a.labels if lb in b.labels and lb not in keep]
    rows = [lb for lb in a.labels if lb not in b.labels]
    cols = [lb for lb in b.labels if lb not in a.labels]
    if any(a.size(lb) != b.size(lb) for lb in inner) or a.tensor.dtype not in MATMUL_DTYPES:
        raise _Decline
    a = _transposed(a, batch + rows + inner)
    b = _transposed(b, batch + inner + cols)
    m = _product([a.size(lb) for lb in rows] or [1])
    k = _product([a.size(lb) for lb in inner] or [1])
    n = _product([b.size(lb) for lb in cols] or [1])
    a_batch = tuple(a.size(lb) for lb in batch)
    b_batch = tuple(b.size(lb) for lb in batch)
    product = ops.matmul(
        _reshaped(a.tensor, (*a_batch, m, k)), _reshaped(b.tensor, (*b_batch, k, n))
    )
    batch_dims = tuple(_broadcast(x, y) for x, y in zip(a_batch, b_batch))
    shape = (*batch_dims, *(a.size(lb) for lb in rows), *(b.size(lb) for lb in cols))
    return _Term(_reshaped(product, shape), batch + rows + cols)


def lowered(node: Node) -> Tensor:
    """The Einsum node's output computed by Transpose/Reshape/MatMul/ReduceSum nodes
    (built in the current graph); raises _Decline where the module doc says."""
    spec = parse_equation(node.attrs["equation"], len(node.inputs))
    terms = [_Term(t, _expanded(labels, t.ndim)) for labels, t in zip(spec.inputs, node.inputs)]
    batch_rank = max(
        (t.tensor.ndim - len(lb) + 1 for t, lb in zip(terms, spec.inputs) if ELLIPSIS in lb),
        default=0,
    )
    output = _expanded(spec.output, 0, batch_rank)
    terms = [_diagonal(t) for t in terms]
    for i, term in enumerate(terms):  # step 2
        elsewhere = set(output).union(*(t.labels for j, t in enumerate(terms) if j != i))
        terms[i] = _summed(term, [lb for lb in term.labels if lb not in elsewhere])
    result = terms[0]
    for i, term in enumerate(terms[1:], start=1):
        keep = set(output).union(*(t.labels for t in terms[i + 1 :]))
        result = _contract(result, term, keep)
    result = _summed(result, [lb for lb in result.labels if lb not in output])
    return _transposed(result, output).tensor


@register("lower_einsum", levels=(2, 3), phase="rewrite")
def lower_einsum(g: Graph) -> PassResult:
    """Rewrite Einsum nodes as Transpose/Reshape/MatMul/ReduceSum, which compile to
    generated code (the module doc says how, and which Einsums keep their node)."""
    count = 0
    for sub in list(all_graphs(g)):
        rewriter = Rewriter(sub)

        def visit(node: Node, rw: Rewriter) -> None:
            if node.op_type == "Einsum":
                rw.try_replace(node, lambda: _lowered_or_none(node))

        count += rewriter.sweep(visit)
    return PassResult(g, count > 0, f"lowered {count} Einsum(s)")


def _lowered_or_none(node: Node) -> Tensor | None:
    try:
        return lowered(node)
    except (_Decline, MdslError):
        return None
