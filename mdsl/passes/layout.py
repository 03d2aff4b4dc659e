"""Layout transformation ("layout_nhwc"): convolution chains run on NHWC data.

Convolutions and the ops around them run faster channels-last (contiguous channels feed
the GEMM inner loop and the vector units). The pass stores those tensors as NHWC while
every tensor keeps the origin shape and format the user declared; conversions are explicit
`TransData` nodes (`mdsl.ops.storage`), never implicit. It works like TVM's ConvertLayout
and TensorFlow's layout optimizer:

1. Assign, in topological order: a Conv over rank-4 NCHW (or rank-4 ND) data reads and
   writes NHWC. An op that accepts NHWC (its `FormatRule`: pooling, BatchNormalization,
   pointwise ops, see `mdsl.ops.storage`) follows its inputs: it runs NHWC when at least
   as many of its layout inputs are available in NHWC (stored so, or already converted)
   as are not, so a residual Add joins the chain but an op whose inputs are mostly NCHW
   does not pull them over. Everything else reads origin layout, and so do graph outputs.
2. Convert: where a consumer wants a tensor in a layout it is not stored in, a TransData
   node is inserted before the consumer; one per tensor and layout, shared by every
   consumer that wants it. A chain Conv -> BN -> Relu -> Conv gets exactly one conversion
   in and one out.
3. Cancel: a TransData reading another TransData reads that one's input instead
   (A->B->C becomes A->C), a conversion to the layout its input already has disappears
   (A->B->A cancels), and conversions left unread are removed.

The pass is idempotent: run twice, it changes nothing the second time. Tensors of rank
other than 4, and an op reading a per-channel operand of rank < 4 beside NHWC data (an
Add of a `(C, 1, 1)` bias), stay in origin layout, with conversions around them.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph("cbr") as g:
...     x = g.input("x", ("N", 3, 8, 8))
...     y = ops.relu(ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), pads=1))
...     g.output(ops.conv2d(y, mdsl.param("w2", (4, 4, 1, 1))), "y")
>>> g2 = mdsl.passes.run(g, ["layout_nhwc"])
>>> [n.op_type for n in g2.nodes if n.op_type not in ("Input", "Const", "Output")]
['TransData', 'Conv', 'Relu', 'Conv', 'TransData']
>>> g2.node("Relu").output.type.storage_shape
(Dim('N'), 8, 8, 4)
"""

from __future__ import annotations

from mdsl.ir.format import Format
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import all_graphs, mark_changed, new_node, prune_dead, replace_all_uses
from mdsl.ops.storage import format_rule, stored_as, with_layout, written_type
from mdsl.passes.manager import PassResult, register

TARGET = Format.NHWC
# Ops that start an NHWC region; the others accepting NHWC only follow their inputs.
NHWC_ANCHORS = ("Conv",)
TRANS_DATA = "TransData"


@register("layout_nhwc", levels=(3,), phase="layout")
def layout_nhwc(g: Graph) -> PassResult:
    """Store convolution chains as NHWC, with explicit TransData conversions around them."""
    before = _layout_signature(g)
    conversions_before = _count_conversions(g)
    for sub in list(all_graphs(g)):
        assign_layouts(sub)
    cancel_conversions(g)
    changed = _layout_signature(g) != before
    conversions = _count_conversions(g)
    nhwc = sum(
        1
        for sub in all_graphs(g)
        for n in sub
        if n.op_type != TRANS_DATA and any(stored_as(t.type) == TARGET for t in n.outputs)
    )
    summary = f"{nhwc} ops write NHWC; TransData nodes {conversions_before} -> {conversions}"
    return PassResult(g, changed, summary)


# -- 1 and 2: choosing layouts and inserting conversions --------------------------------------
def assign_layouts(g: Graph) -> int:
    """Choose each node's layout in `g` (not its subgraphs) and insert the TransData nodes
    that makes necessary; returns how many were inserted."""
    conversions: dict[tuple[Tensor, Format | None], Tensor] = {}
    order: list[Node] = []
    for node in g.nodes:
        if node.op_type not in (INPUT, CONST):
            _place_node(g, node, conversions, order)
        order.append(node)
    g.replace_nodes(order)
    mark_changed(g)
    return len({id(t) for t in conversions.values()})


def _place_node(g: Graph, node: Node, conversions: dict, order: list[Node]) -> None:
    """Convert `node`'s inputs to the layouts it reads and set its outputs' storage."""
    layout = None
    if node.op_type == OUTPUT:
        wanted = {}
    elif node.op_type == TRANS_DATA:
        wanted = {
            0: stored_as(with_layout(node.inputs[0].type, Format.of(node.attrs["src_format"])))
        }
    else:
        layout = chosen_layout(node, conversions)
        rule = format_rule(node.op_type)
        wanted = dict.fromkeys(rule.layout_inputs(node), layout) if rule is not None else {}
    for i, t in enumerate(node.inputs):
        want = wanted.get(i)
        if t is not None and stored_as(t.type) != want:
            node.inputs[i] = _converted(g, t, want, node, conversions, order)
    if node.op_type not in (OUTPUT, TRANS_DATA):
        for i, t in enumerate(node.outputs):
            t.type = written_type(node, i, layout)


def chosen_layout(node: Node, conversions: dict | None = None) -> Format | None:
    """TARGET if `node` should read and write NHWC, None for origin layout."""
    rule = format_rule(node.op_type)
    if rule is None or TARGET not in rule.formats:
        return None
    tensors = [node.inputs[i] for i in rule.layout_inputs(node)]
    if not tensors or not all(_can_be_nhwc(t) for t in tensors):
        return None
    if node.op_type in NHWC_ANCHORS:
        return TARGET
    conversions = conversions or {}
    available = sum(stored_as(t.type) == TARGET or (t, TARGET) in conversions for t in tensors)
    return TARGET if available and 2 * available >= len(tensors) else None


def _can_be_nhwc(t: Tensor) -> bool:
    return t.type.rank == 4 and t.type.format in (Format.NCHW, Format.ND)


def _converted(
    g: Graph, t: Tensor, want: Format | None, consumer: Node, conversions: dict, order: list
) -> Tensor:
    """`t` stored as `want` (None: origin layout), through a TransData shared per layout."""
    key = (t, want)
    if key not in conversions:
        attrs = {
            "src_format": _layout_attr(t, stored_as(t.type)),
            "dst_format": _layout_attr(t, want),
        }
        like = t.producer if consumer.op_type == OUTPUT else consumer  # keeps it in a layer
        node = new_node(g, TRANS_DATA, [t], attrs, [with_layout(t.type, want)], like=like)
        order.append(node)
        conversions[key] = node.outputs[0]
    return conversions[key]


def _layout_attr(t: Tensor, fmt: Format | None) -> str:
    """The format name of a layout: a rank-4 ND tensor's origin layout is called NCHW."""
    if fmt is None:
        fmt = Format.NCHW if t.type.rank == 4 and t.type.format == Format.ND else t.type.format
    return str(fmt)


# -- 3: cancelling conversions ---------------------------------------------------------------
def cancel_conversions(g: Graph) -> int:
    """Compose chained TransData nodes, drop those converting to the layout their input
    already has, and remove the unread ones, in `g` and its subgraphs; returns how many
    TransData nodes went away."""
    before = _count_conversions(g)
    for sub in list(all_graphs(g)):
        candidates = [n for n in sub if n.op_type == TRANS_DATA]
        for node in candidates:
            _compose_with_producer(node)
            mark_changed(sub)
            if stored_as(node.inputs[0].type) == stored_as(node.outputs[0].type):
                replace_all_uses(g, node.outputs[0], node.inputs[0])
        prune_dead(sub, candidates)
    return before - _count_conversions(g)


def _compose_with_producer(node: Node) -> None:
    """TransData(TransData(x, A->B), B->C) reads x directly: A->C."""
    producer = node.inputs[0].producer
    while producer.op_type == TRANS_DATA and producer.graph is node.graph:
        node.inputs[0] = producer.inputs[0]
        node.attrs = {**node.attrs, "src_format": producer.attrs["src_format"]}
        producer = node.inputs[0].producer


# -- bookkeeping -------------------------------------------------------------------------------
def _count_conversions(g: Graph) -> int:
    return sum(1 for sub in all_graphs(g) for n in sub if n.op_type == TRANS_DATA)


def _layout_signature(g: Graph) -> list:
    return [
        (n.name, tuple(id(t) for t in n.inputs), tuple(t.type for t in n.outputs))
        for sub in all_graphs(g)
        for n in sub
    ]
