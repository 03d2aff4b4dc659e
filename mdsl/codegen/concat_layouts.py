"""Which convolutions ask oneDNN for nChw16c, so that Concats need no copies.

oneDNN 3.2's fastest float32 convolutions (`brgconv`) take channels last, where a
channel Concat's inputs are spread over its output (each pixel holds every channel) and
must be copied. In nChw16c at batch 1, an input whose channels fill whole blocks is one
run of the output that its producers write straight into (`concat_in_place`). oneDNN
computes nChw16c with its older `jit` kernels, though: as fast on SqueezeNet's and
DenseNet's layers, up to 25% slower on Inception v2's 7x7 ones. So the layout is chosen
per cluster, the convolutions and such Concats connected by tensors (through
element-wise ops and poolings): nChw16c when its Concats write at least
`BYTES_PER_KFLOP` bytes for every 1,000 FLOPs of its convolutions. Measured on a whole
model, 1 thread, against channels last (docs/cpu-kernels.md): SqueezeNet (8 bytes per
kFLOP) and DenseNet-121 (7) ran 4-5% faster; Inception v1 and v2 (1) 1-2% slower.
"""

from __future__ import annotations

import math

from mdsl.ir.graph import Graph, Node, Tensor
from mdsl.ir.rewrite import use_map

BYTES_PER_KFLOP = 4.0
BLOCK = 16  # nChw16c
# ops between convolutions and Concats that oneDNN's layouts pass through
# (`mdsl.codegen.blocked`: element-wise kernels and poolings keep them)
PASSING = frozenset(
    {"Relu", "BatchNormalization", "Mul", "Add", "Sub", "Div", "Clip", "Sigmoid",
     "LeakyRelu", "MaxPool", "AveragePool", "Identity", "Dropout"}
)  # fmt: skip


def blocked_convolutions(g: Graph) -> frozenset[str]:
    """The Conv nodes of `g` (2-D, ungrouped) to ask for nChw16c (module doc)."""
    uses = use_map(g)
    parent: dict[Node, Node] = {}

    def root(n: Node) -> Node:
        while parent.get(n, n) is not n:
            n = parent[n]
        return n

    concats = [n for n in g if _in_place_concat(n)]
    members = [n for n in g if _conv_2d(n)] + concats
    for n in members:
        parent[n] = n
    for n in members:
        for m in _neighbours(n, uses):
            if m in parent:
                parent[root(m)] = root(n)
    written: dict[Node, int] = {}
    work: dict[Node, int] = {}
    for n in concats:
        written[root(n)] = written.get(root(n), 0) + 4 * math.prod(n.outputs[0].shape)
    for n in members:
        if n.op_type == "Conv":
            work[root(n)] = work.get(root(n), 0) + _flops(n)
    chosen = {r for r in written if written[r] * 1000 >= BYTES_PER_KFLOP * work.get(r, 0)}
    return frozenset(n.name for n in members if n.op_type == "Conv" and root(n) in chosen)


def _in_place_concat(n: Node) -> bool:
    """A batch-1 float32 channel Concat of 4-D static tensors whose inputs each fill
    whole blocks of 16 channels."""
    if n.op_type != "Concat" or not _batch_1_nchw(n.outputs[0]):
        return False
    if n.attrs["axis"] % 4 != 1:
        return False
    return all(t is not None and t.shape[1] % BLOCK == 0 for t in n.inputs)


def _conv_2d(n: Node) -> bool:
    return (
        n.op_type == "Conv"
        and _batch_1_nchw(n.outputs[0])
        and n.attrs.get("group", 1) == 1
        and n.outputs[0].shape[2] > 1
    )


def _batch_1_nchw(t: Tensor) -> bool:
    shape = tuple(t.shape)
    return (
        len(shape) == 4
        and all(isinstance(d, int) for d in shape)
        and shape[0] == 1
        and t.dtype.name == "float32"
    )


def _neighbours(n: Node, uses) -> list[Node]:
    """The Conv and Concat nodes whose tensors reach `n`'s activations, or are reached
    from its result, through PASSING ops."""
    found: list[Node] = []
    inputs = n.inputs[:1] if n.op_type == "Conv" else n.inputs
    stack = [t.producer for t in inputs if t is not None and t.producer is not None]
    seen: set[Node] = set()
    while stack:  # upstream
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        if m.op_type in ("Conv", "Concat"):
            found.append(m)
        elif m.op_type in PASSING:
            stack += [t.producer for t in m.inputs if t is not None and t.producer is not None]
    stack = [user for user, _ in uses.get(n.outputs[0], [])]
    while stack:  # downstream
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        if m.op_type in ("Conv", "Concat"):
            found.append(m)
        elif m.op_type in PASSING:
            stack += [user for t in m.outputs for user, _ in uses.get(t, [])]
    return found


def _flops(conv: Node) -> int:
    """Multiply-adds times 2 of a Conv node (weights O, I/group, kh, kw)."""
    w = conv.inputs[1].shape
    return 2 * math.prod(conv.outputs[0].shape) * math.prod(w[1:])
