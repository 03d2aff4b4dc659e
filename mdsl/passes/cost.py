"""The static cost model: FLOPs and bytes per node, for placement, pipeline staging and
the profiler (which counts the nodes it runs as callbacks or interprets with it).

Estimates, not measurements: what matters to the passes using them is the ratio between
nodes (a GEMM against a LayerNorm, a block against a block) and between compute and data
movement. Rules (`node_flops`):

- MatMul / Gemm: 2*M*N*K (one multiply-add per output per reduced element), + the bias;
  Conv: 2 * outputs * (Cin/groups)*KH*KW, + the bias; Einsum: 2 * max(outputs, inputs read);
- pointwise ops: per output element, for the passes one op, TRANSCENDENTAL_OPS for
  exp-like ones (declared with `cost="transcendental"`); as the profiler counts
  (`counted=True`), the operations of the op's expression form (`expression_ops`);
- reductions and normalizations: per input element, NORMALIZATION_OPS ops (counted: one);
- data movement: no FLOPs, only bytes; other ops: one op per output element (counted:
  none);
- control flow: the most expensive branch (If/Case), one run of cond and body (While);
- bytes: what a node reads plus what it writes (no caches).

Symbolic dims take the sizes in `sizes` (symbol -> int); a symbol not given counts as
DEFAULT_SYMBOL_SIZE, or its declared maximum when that is smaller.

>>> import mdsl
>>> with mdsl.Graph("mlp") as g:
...     x = g.input("x", ("B", 64))
...     g.output(mdsl.ops.relu(x @ mdsl.param("w", (64, 32))), "y")
>>> model = CostModel(g, {"B": 8})
>>> [(n.op_type, model.node(n).flops) for n in g if n.op_type in ("MatMul", "Relu")]
[('MatMul', 32768), ('Relu', 256)]
>>> model.tensor_bytes(g.outputs["y"])
1024
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mdsl import expr as E
from mdsl.ir.dim import Dim
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ops.bindings import get_binding
from mdsl.ops.registry import get_op, has_op

DEFAULT_SYMBOL_SIZE = 32
TRANSCENDENTAL_OPS = 8
NORMALIZATION_OPS = 5
FREE_OPS = frozenset({"var", "const", "cast"})  # no arithmetic: not counted as FLOPs
_STRUCTURAL = frozenset({INPUT, CONST, OUTPUT})


@dataclass(frozen=True, slots=True)
class NodeCost:
    """One run of one node: arithmetic operations and bytes read plus written."""

    flops: int
    bytes: int

    def __add__(self, other: NodeCost) -> NodeCost:
        return NodeCost(self.flops + other.flops, self.bytes + other.bytes)


ZERO = NodeCost(0, 0)


class CostModel:
    """Costs of the nodes of `g` (and of its control-flow subgraphs) with symbols sized
    by `sizes`; results are cached per node."""

    def __init__(self, g: Graph, sizes: Mapping[str, int] | None = None):
        self.sizes = _symbol_sizes(g, sizes or {})
        self._cache: dict[int, NodeCost] = {}

    # -- sizes -----------------------------------------------------------------------------
    def dims(self, shape) -> tuple[int, ...]:
        """`shape` with every symbolic dim replaced by its assumed size."""
        return tuple(self._dim(d) for d in shape)

    def _dim(self, d) -> int:
        if isinstance(d, int):
            return d
        missing = {s: DEFAULT_SYMBOL_SIZE for s in d.free_symbols if s not in self.sizes}
        return max(0, int(d.evaluate({**self.sizes, **missing})))

    def numel(self, t: Tensor) -> int:
        return math.prod(self.dims(t.shape))

    def tensor_bytes(self, t: Tensor) -> int:
        """Bytes of `t` with the assumed sizes (what a copy of it moves)."""
        return self.numel(t) * t.dtype.itemsize

    # -- nodes -----------------------------------------------------------------------------
    def node(self, node: Node) -> NodeCost:
        cached = self._cache.get(id(node))
        if cached is None:
            cached = self._cache[id(node)] = self._node_cost(node)
        return cached

    def graph(self, g: Graph) -> NodeCost:
        """The sum over the nodes of `g`."""
        total = ZERO
        for node in g:
            total = total + self.node(node)
        return total

    def _node_cost(self, node: Node) -> NodeCost:
        if node.op_type in _STRUCTURAL:
            return ZERO
        if node.subgraphs:
            return self._control_flow_cost(node)
        tensors = [*node.inputs, *node.outputs]
        shapes = [None if t is None else self.dims(t.shape) for t in tensors]
        return NodeCost(self._flops(node), tensors_bytes(tensors, shapes))

    def _control_flow_cost(self, node: Node) -> NodeCost:
        subs = {key: self.graph(sub) for key, sub in node.subgraphs.items()}
        if node.op_type == "While":
            return sum(subs.values(), ZERO)
        return max(subs.values(), key=lambda c: (c.flops, c.bytes), default=ZERO)

    def _flops(self, node: Node) -> int:
        if not node.outputs:
            return 0
        shapes = [None if t is None else self.dims(t.shape) for t in node.inputs]
        return node_flops(node, shapes, self.dims(node.outputs[0].shape))


def node_flops(node: Node, shapes: list, out_shape, counted: bool = False) -> int:
    """The FLOPs of one run of `node` with inputs of `shapes` (None: an absent input) and a
    first output of `out_shape`: the passes' weights, or (`counted`) the operations the
    profiler counts (see the module doc for the rules)."""
    out = math.prod(out_shape)
    op = node.op_type
    bias = out if len(shapes) > 2 and shapes[2] is not None else 0
    if op == "MatMul" and shapes and shapes[0]:
        return 2 * out * shapes[0][-1]
    if op == "Gemm" and shapes and shapes[0]:
        k = shapes[0][0] if node.attrs.get("transA") else shapes[0][-1]
        return 2 * out * k + bias
    if op == "Conv" and len(shapes) > 1 and shapes[1]:
        return 2 * out * math.prod(shapes[1][1:]) + bias
    if op == "Einsum":
        read = sum(math.prod(s) for s in shapes if s)
        return 2 * max(out, read)
    opdef = get_op(op) if has_op(op) and not node.subgraphs else None
    category = opdef.category if opdef else "opaque"
    if category == "data_movement":
        return 0
    if category == "reduction" and shapes and shapes[0] is not None:
        return (1 if counted else NORMALIZATION_OPS) * math.prod(shapes[0])
    if counted:
        return out * _expression_ops_of(node) if category == "pointwise" else 0
    transcendental = opdef is not None and opdef.cost == "transcendental"
    return out * (TRANSCENDENTAL_OPS if transcendental else 1)


def tensors_bytes(tensors, shapes) -> int:
    """Bytes of `tensors` (None: absent) of `shapes`: what a node reads plus writes."""
    return sum(math.prod(s) * t.dtype.itemsize for t, s in zip(tensors, shapes) if t is not None)


def expression_ops(*roots: E.Expr) -> int:
    """Arithmetic operations in the expressions (shared subexpressions count once).

    >>> x = E.var("x")
    >>> expression_ops(x * E.sigmoid(1.702 * x))
    3
    """
    return sum(1 for n in E.walk(*roots) if n.op not in FREE_OPS)


def _expression_ops_of(node: Node) -> int:
    """The operations of a pointwise node's expression form (at least one)."""
    binding = get_binding(node.op_type, "expr")
    if binding is None:
        return 1
    args = [None if t is None else E.var(f"in{i}") for i, t in enumerate(node.inputs)]
    try:
        result = binding.fn(*args, **node.attrs)
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        return max(1, expression_ops(*(E.as_expr(o) for o in outs)))
    except Exception:  # an expression form failing here fails in the interpreter too
        return 1


def _symbol_sizes(g: Graph, given: Mapping[str, int]) -> dict[str, int]:
    """`given`, plus for each other symbol of `g`'s inputs the default size (its
    declared maximum when smaller)."""
    sizes = {str(k): int(v) for k, v in given.items()}
    for t in g.inputs.values():
        for d in t.shape:
            if isinstance(d, Dim) and d.name is not None and d.name not in sizes:
                sizes[d.name] = _default_size(d)
    return sizes


def _default_size(d: Dim) -> int:
    return DEFAULT_SYMBOL_SIZE if d.max is None else min(d.max, DEFAULT_SYMBOL_SIZE)
