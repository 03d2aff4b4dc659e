"""How much work the ONNX importer may spend computing values at import time.

The importer evaluates nodes whose inputs are known (shape arithmetic, constant
folding) so that shapes come out static. A hostile or just unusual model can make that
work unbounded: a 1 KB model whose Reshape shape needs forty 4096x4096 MatMuls, or a
ConstantOfShape of [10^6, 10^6]. An `ImportBudget` caps it: a node is evaluated only
when its estimated work (elements read and written, times the contracted length for
contractions) fits the per-node cap and what is left of the model's total, and at most
`MAX_OPS` nodes are evaluated. A node over budget is not an error: its value stays a
run-time node of the imported graph.

>>> import numpy as np
>>> budget = ImportBudget(max_work=1000)
>>> budget.allows("Add", [np.ones(10), np.ones(10)])
True
>>> budget.allows("ConstantOfShape", [np.array([10**6, 10**6])])
False
>>> budget.allows("MatMul", [np.ones((20, 20)), np.ones((20, 20))])
False
"""

from __future__ import annotations

import math

import numpy as np

MAX_OPS = 10_000  # nodes evaluated at import time, per model
MAX_NODE_WORK = 1 << 24  # estimated element operations of one node
MAX_WORK = 1 << 26  # ... of all the nodes of one model

_CONTRACTIONS = frozenset(
    {"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "Einsum", "Conv", "ConvTranspose"}
)


class ImportBudget:
    """What is left to spend on import-time evaluation of one model (see the module doc)."""

    def __init__(
        self, *, max_ops: int = MAX_OPS, max_work: int = MAX_WORK, max_node: int = MAX_NODE_WORK
    ):
        self.ops_left = max_ops
        self.work_left = max_work
        self.max_node = max_node

    def allows(self, op_type: str, args: list) -> bool:
        """Whether a node of `op_type` over the known values `args` (None: absent) may be
        evaluated now; when it may, its work is charged."""
        work = estimated_work(op_type, args)
        if self.ops_left <= 0 or work is None or work > min(self.max_node, self.work_left):
            return False
        self.ops_left -= 1
        self.work_left -= work
        return True


def estimated_work(op_type: str, args: list) -> int | None:
    """Element operations evaluating `op_type` over `args` takes, roughly (the inputs'
    elements plus those of outputs larger than them); None when unknowable."""
    arrays = [np.asarray(a) for a in args if a is not None]
    read = sum(a.size for a in arrays)
    try:
        written = _generated_elements(op_type, arrays)
    except (ValueError, TypeError, OverflowError, IndexError):
        return None
    if op_type in _CONTRACTIONS:
        longest = max((max(a.shape, default=1) for a in arrays), default=1)
        return (read + written) * max(1, longest)
    return read + written


def _generated_elements(op_type: str, arrays: list[np.ndarray]) -> int:
    """Elements of outputs larger than the inputs: broadcasting, and outputs sized by
    their inputs' values rather than their shapes (None-like ValueError: unknowable)."""
    if not arrays:
        return 0
    if op_type == "ConstantOfShape":
        return math.prod(_ints(arrays[0]))
    if op_type == "Expand" and len(arrays) > 1:
        return arrays[0].size * math.prod(max(1, s) for s in _ints(arrays[1]))
    if op_type == "Tile" and len(arrays) > 1:
        return arrays[0].size * math.prod(_ints(arrays[1]))
    if op_type == "Range" and len(arrays) == 3:
        start, limit, delta = (float(a.reshape(-1)[0]) for a in arrays)
        return 0 if delta == 0 else max(0, math.ceil((limit - start) / delta))
    if op_type == "Pad" and len(arrays) > 1:
        pads = _ints(arrays[1])
        rank = arrays[0].ndim
        return math.prod(d + sum(pads[i::rank]) for i, d in enumerate(arrays[0].shape))
    if op_type in ("Gather", "GatherElements", "GatherND") and len(arrays) > 1:
        return arrays[0].size * arrays[1].size  # an upper bound
    if op_type == "OneHot" and len(arrays) > 1:
        return arrays[0].size * max(1, int(arrays[1].reshape(-1)[0]))
    if op_type in ("Resize", "Upsample"):
        raise ValueError("sized by scales")
    try:
        return math.prod(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:  # not a broadcasting op
        return 0


def _ints(array: np.ndarray) -> list[int]:
    values = [int(v) for v in array.reshape(-1)]
    if any(v < 0 for v in values):
        raise ValueError("negative size")
    return values


def _one_hot(arrays: list[np.ndarray]) -> int:
    depth = int(arrays[1].reshape(-1)[0]) if len(arrays) > 1 else 1
    return arrays[0].size * max(1, depth)
