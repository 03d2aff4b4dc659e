"""Notebook reprs of graphs, nodes and tensors: `_repr_html_` tables (and the picture).

Jupyter shows an object's `_repr_html_()` when a cell ends with it. A Graph shows its
inputs, outputs, op counts and layers, and its picture when Graphviz is there; a Node its
op type, inputs, outputs, attrs, source line, fusion group and device; a Tensor its type
and producer. Compare reports, profiles and diffs define their own (`mdsl.ir.html`).

They are installed on the IR classes here because the IR must not import the tools (the
picture comes from `mdsl.viz`); `import mdsl` does it.

>>> import mdsl
>>> with mdsl.Graph("demo") as g:
...     y = mdsl.ops.softmax(g.input("x", ("N", 4)), axis=-1)
...     g.output(y, "y")
>>> "<td>axis</td><td>-1</td>" in y.producer._repr_html_()
True
"""

from __future__ import annotations

import logging
from collections import Counter

from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.html import escape, html_block, html_table
from mdsl.log import get_logger

PICTURE_NODE_LIMIT = 400  # beyond this, the notebook picture shows layers collapsed
_log = get_logger(__name__)


def graph_html(g: Graph) -> str:
    ops = Counter(n.op_type for n in g if n.op_type not in (INPUT, CONST, OUTPUT))
    params, nbytes = g.parameter_count()
    title = f"Graph {g.name!r}: {len(g)} nodes, {params:,} parameters ({nbytes:,} bytes)"
    ios = [["input", n, t.dtype, _shape(t.shape)] for n, t in g.inputs.items()]
    ios += [["output", n, t.dtype, _shape(t.shape)] for n, t in g.outputs.items()]
    parts = [
        html_table(["", "name", "dtype", "shape"], ios),
        html_table(["op type", "nodes"], ops.most_common(12)),
    ]
    top = Counter(n.name.split("/")[0] for n in g if "/" in n.name)
    if top:
        parts.append(html_table(["layer", "nodes"], top.most_common(12)))
    parts.append(_picture(g))
    return html_block(title, *parts)


def _picture(g: Graph) -> str:
    from mdsl.tools import viz

    try:
        depth = 1 if len(g) > PICTURE_NODE_LIMIT else None
        svg = viz.run_dot(viz.to_dot(g, collapse_depth=depth), "svg").decode("utf-8")
    except viz.GraphvizError as e:
        _log.log(logging.DEBUG, "no picture: %s", e)
        return f"<p><i>no picture: {escape(e.message)}</i></p>"
    return svg[svg.find("<svg") :]


def node_html(node: Node) -> str:
    rows = [
        ["op type", node.op_type],
        ["inputs", ", ".join("None" if t is None else f"{t.name}: {t.type}" for t in node.inputs)],
        ["outputs", ", ".join(f"{t.name}: {t.type}" for t in node.outputs)],
    ]
    rows += [[name, _attr(value)] for name, value in node.attrs.items() if name != "value"]
    for label, value in (
        ("source", node.source),
        ("fusion group", node.fusion_group),
        ("device", node.device),
    ):
        if value:
            rows.append([label, value])
    return html_block(f"Node {node.name!r}", html_table(["", ""], rows))


def tensor_html(tensor: Tensor) -> str:
    t = tensor.type
    rows = [
        ["shape", _shape(t.shape)],
        ["dtype", t.dtype],
        ["format", t.format],
        ["producer", f"{tensor.producer.name} ({tensor.producer.op_type})"],
    ]
    if tensor.producer.source:
        rows.append(["source", tensor.producer.source])
    return html_block(f"Tensor {tensor.name!r}", html_table(["", ""], rows))


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _attr(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def install() -> None:
    Graph._repr_html_ = graph_html
    Node._repr_html_ = node_html
    Tensor._repr_html_ = tensor_html


install()
