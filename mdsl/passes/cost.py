"""The static cost model shared by placement and pipeline staging: FLOPs and bytes per node.

Estimates, not measurements: what matters to the passes using them is the ratio between
nodes (a GEMM against a LayerNorm, a block against a block) and between compute and data
movement. Rules:

- MatMul / Gemm: 2*M*N*K (one multiply-add per output per reduced element), + the bias;
  Conv: 2 * outputs * (Cin/groups)*KH*KW; Einsum: 2 * outputs * the contracted sizes;
- pointwise ops: one op per output element, TRANSCENDENTAL_OPS ops for exp/erf/tanh-like
  ones (those declared with `cost="transcendental"`); reductions and normalizations:
  NORMALIZATION_OPS ops per input element;
- data movement: no FLOPs, only bytes;
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

from mdsl.ir.dim import Dim
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ops.registry import get_op, has_op

DEFAULT_SYMBOL_SIZE = 32
TRANSCENDENTAL_OPS = 8
NORMALIZATION_OPS = 5
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
        moved = sum(self.tensor_bytes(t) for t in [*node.inputs, *node.outputs] if t is not None)
        return NodeCost(self._flops(node), moved)

    def _control_flow_cost(self, node: Node) -> NodeCost:
        subs = {key: self.graph(sub) for key, sub in node.subgraphs.items()}
        if node.op_type == "While":
            return sum(subs.values(), ZERO)
        return max(subs.values(), key=lambda c: (c.flops, c.bytes), default=ZERO)

    def _flops(self, node: Node) -> int:
        if not node.outputs:
            return 0
        out = self.numel(node.outputs[0])
        shapes = [None if t is None else self.dims(t.shape) for t in node.inputs]
        op = node.op_type
        if op == "MatMul" and shapes[0]:
            return 2 * out * shapes[0][-1]
        if op == "Gemm" and shapes[0]:
            k = shapes[0][0] if node.attrs.get("transA") else shapes[0][-1]
            return 2 * out * k + (out if len(shapes) > 2 and shapes[2] is not None else 0)
        if op == "Conv" and len(shapes) > 1 and shapes[1]:
            return 2 * out * math.prod(shapes[1][1:]) + (out if len(shapes) > 2 else 0)
        if op == "Einsum":
            read = sum(math.prod(s) for s in shapes if s)
            return 2 * max(out, read)
        opdef = get_op(op) if has_op(op) else None
        category = opdef.category if opdef else "opaque"
        if category == "data_movement":
            return 0
        if category == "reduction" and shapes and shapes[0] is not None:
            return NORMALIZATION_OPS * math.prod(shapes[0])
        transcendental = opdef is not None and opdef.cost == "transcendental"
        return out * (TRANSCENDENTAL_OPS if transcendental else 1)


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
