"""The self-contained HTML page of `mdsl.viz.render(g, "graph.html")`.

One file, nothing fetched: the picture (the SVG the system Graphviz drew, or none: then
the page lays the graph out itself with the Graphviz build it carries), a panel showing
the clicked node's details, a collapsible layer tree (`<details>` elements, so it folds
without scripts) whose entries jump to their cluster, and a table of every node (subgraph
nodes included). The script (`viz_page.js`) pans and zooms, collapses a layer cluster into
one box when clicked (and back), and filters the table and the picture by search words.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import re
from collections import Counter
from importlib import resources
from typing import TYPE_CHECKING

from mdsl.ir.errors import MdslError
from mdsl.ir.graph import OUTPUT, Graph, Node
from mdsl.tools.viz import attr_lines, html_text, type_label

if TYPE_CHECKING:
    from mdsl.tools.viz import _DotWriter

OPEN_TREE_DEPTH = 1  # layers at this depth and above start unfolded

_PROLOG = re.compile(r"<\?xml.*?\?>|<!DOCTYPE.*?>|<!--.*?-->", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(:\w+)?="[^"]*"')
_DOT_ITEM = re.compile(r"\s*([A-Za-z]+\d+) \[")  # a node line of the DOT text: `n12 [...]`
LAYOUT_ENGINE = "viz-global.js"  # Viz.js: Graphviz compiled to WebAssembly (see _vendor/)

STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 0; color: #1d232a; }
header { padding: 10px 16px; background: #f3f5f8; border-bottom: 1px solid #d5dae1; }
h1 { font-size: 17px; margin: 0 0 2px; }
h2 { font-size: 14px; margin: 14px 0 6px; }
.layout { display: flex; align-items: flex-start; }
nav { width: 280px; flex: none; padding: 0 12px 16px; max-height: 92vh; overflow: auto;
      position: sticky; top: 0; border-right: 1px solid #e1e5ea; }
main { flex: 1; min-width: 0; padding: 0 16px 24px; }
details { margin-left: 12px; }
nav > details { margin-left: 0; }
summary { cursor: pointer; white-space: nowrap; }
.leaf { margin-left: 26px; white-space: nowrap; }
.count { color: #6b7480; font-size: 11px; }
.viewer { display: flex; gap: 10px; align-items: stretch; }
.viewer .picture { flex: 1; min-width: 0; }
#details { width: 300px; flex: none; height: 78vh; overflow: auto; font-size: 12px;
           border: 1px solid #d5dae1; padding: 6px 8px; background: #fafbfc; }
#details td { border: none; padding: 1px 4px; word-break: break-word; }
#details td:first-child { color: #6b7480; white-space: nowrap; }
#details td.attrs, #details td.source { font-family: ui-monospace, monospace; font-size: 11px; }
g.node.selected polygon, g.node.selected ellipse, g.node.selected path { stroke: #d4730b;
           stroke-width: 3px; }
g.node.hit polygon, g.node.hit ellipse, g.node.hit path { stroke: #c0392b; stroke-width: 3px; }
g.node.dim { opacity: 0.3; }
g.cluster { cursor: zoom-out; }
g.node[id^="box-"] { cursor: zoom-in; }
.picture { height: 78vh; border: 1px solid #d5dae1; background: #fff; overflow: hidden;
           cursor: grab; position: relative; }
.picture svg { width: 100%; height: 100%; }
.zoom { margin-bottom: 4px; }
.zoom button { font: inherit; padding: 1px 8px; }
td.attrs { font-family: ui-monospace, monospace; font-size: 11px; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
th, td { text-align: left; padding: 2px 8px; border-bottom: 1px solid #eceff3;
         vertical-align: top; }
th { background: #f3f5f8; position: sticky; top: 0; }
td.name { font-family: ui-monospace, monospace; word-break: break-all; }
tr:target { background: #fff3c4; }
a { color: #1f5fa8; text-decoration: none; }
input { font: inherit; padding: 3px 6px; width: 320px; margin-bottom: 6px; }
"""


def inline_svg(svg: str) -> str:
    """Graphviz's SVG document as an element to inline in HTML: no XML prolog, doctype,
    comments or namespace declarations (HTML knows SVG's)."""
    body = _PROLOG.sub("", svg)
    return _NAMESPACES.sub("", body).strip()


def html_page(g: Graph, svg: str | None, writer: _DotWriter) -> str:
    """The page for `g` drawn as `svg` by `writer` (whose DOT ids the links use); with
    `svg=None` the page lays the graph out when it opens."""
    title = html_text(g.name)
    picture = inline_svg(svg) if svg is not None else ""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>mdsl graph {title}</title><style>{STYLE}</style></head><body>",
            f"<header><h1>{title}</h1><div>{html_text(_headline(g))}</div></header>",
            '<div class="layout">',
            f"<nav><h2>Layers</h2>{_layer_tree(g, writer)}</nav>",
            "<main>",
            '<h2>Graph</h2><div class="zoom"><button id="fit">fit</button> '
            '<button id="zoom-in">+</button> <button id="zoom-out">−</button> '
            '<button id="expand-all">expand all</button> '
            '<span class="count">wheel: zoom, drag: pan, click a node: details, '
            "click a layer: collapse it (its box: expand)</span> "
            '<span class="count" id="status"></span></div>',
            '<div class="viewer">',
            f'<div class="picture" id="picture">{picture}</div>',
            '<aside id="details"><span class="count">click a node for its details</span></aside>',
            "</div>",
            "<h2>Nodes</h2>",
            '<input id="filter" type="search" placeholder="filter: name, op type, layer, '
            'dtype, group, device">',
            _node_table(g, writer),
            "</main></div>",
            _json_script("mdsl-model", viewer_model(g, writer)),
            '<script type="application/octet-stream" id="mdsl-layout-engine">'
            f"{_packed_layout_engine()}</script>",
            f"<script>{_page_script()}</script>",
            "</body></html>",
        ]
    )


def _headline(g: Graph) -> str:
    groups = {n.fusion_group for n in g if n.fusion_group}
    devices = sorted({n.device for n in g if n.device})
    parts = [f"{len(g)} nodes", f"{len(g.layers)} layers"]
    if groups:
        parts.append(f"{len(groups)} fusion groups")
    if devices:
        parts.append("devices " + ", ".join(devices))
    return " · ".join(parts)


# -- the layer tree ----------------------------------------------------------------------------
def _layer_counts(g: Graph) -> Counter:
    """Nodes per layer path, each node counted in its layer and every ancestor."""
    counts: Counter = Counter()
    for node in g:
        parts = node.layer.split("/") if node.layer else []
        for i in range(1, len(parts) + 1):
            counts["/".join(parts[:i])] += 1
    return counts


def _layer_tree(g: Graph, writer: _DotWriter) -> str:
    counts = _layer_counts(g)
    children: dict[str, list[str]] = {}
    for path in counts:
        children.setdefault(path.rpartition("/")[0], []).append(path)
    if not children:
        return '<div class="count">(no layers)</div>'
    return "".join(_tree_entry(p, children, counts, writer) for p in children.get("", []))


def _tree_entry(path: str, children: dict, counts: Counter, writer: _DotWriter) -> str:
    name = html_text(path.rpartition("/")[2])
    target = writer.layer_ids.get(path)
    link = f'<a href="#{target}"' if target else '<a href="#nodes"'
    link += f' data-layer="{html_text(path)}" title="{html_text(path)}">{name}</a>'
    head = f'{link} <span class="count">{counts[path]}</span>'
    kids = children.get(path, [])
    if not kids:
        return f'<div class="leaf">{head}</div>'
    is_open = " open" if path.count("/") + 1 <= OPEN_TREE_DEPTH else ""
    inner = "".join(_tree_entry(k, children, counts, writer) for k in kids)
    return f"<details{is_open}><summary>{head}</summary>{inner}</details>"


# -- the node table ----------------------------------------------------------------------------
def _node_table(g: Graph, writer: _DotWriter) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("node", "op", "attrs", "outputs", "layer", "fusion group", "device", "built at")
    )
    rows = "\n".join(_rows(g, writer, prefix=""))
    return f'<table id="nodes"><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table>'


def _rows(g: Graph, writer: _DotWriter, prefix: str) -> list[str]:
    rows = []
    for node in g:
        rows.append(_row(node, writer, prefix))
        for name, sub in node.subgraphs.items():
            rows += _rows(sub, writer, f"{prefix}{node.name} ▸ {name} ▸ ")
    return rows


def _row(node: Node, writer: _DotWriter, prefix: str) -> str:
    item = writer.item.get(id(node))
    own = item is not None and item.startswith("n")  # drawn as its own box
    row_id = f' id="row-{item}"' if own else ""
    name = html_text(prefix + node.name)
    if item is not None:
        kind = "node" if own else "layer"
        name = f'<a href="#{kind}-{item}">{name}</a>'
    types = node.outputs if node.op_type != OUTPUT else [t for t in node.inputs if t is not None]
    cells = (
        f'<td class="name">{name}</td>',
        f"<td>{html_text(node.op_type)}</td>",
        '<td class="attrs">' + "<br>".join(html_text(a) for a in attr_lines(node)) + "</td>",
        "<td>" + "<br>".join(html_text(type_label(t.type)) for t in types) + "</td>",
        f"<td>{html_text(node.layer)}</td>",
        f"<td>{html_text(node.fusion_group or '')}</td>",
        f"<td>{html_text(node.device or '')}</td>",
        f"<td>{html_text(node.source or '')}</td>",
    )
    return f"<tr{row_id}>{''.join(cells)}</tr>"


# -- what the script works from ----------------------------------------------------------------
def viewer_model(g: Graph, writer: _DotWriter) -> dict:
    """The DOT text as the page's script re-assembles it: body lines, each layer cluster's
    line range with the box that replaces it when collapsed, the edges, node details."""
    lines = writer.lines[: writer.body_lines]
    drawn = _drawn_nodes(g, writer)
    clusters = []
    for layer in writer.clusters:
        members = [m.group(1) for m in map(_DOT_ITEM.match, lines[layer.start : layer.end]) if m]
        box_id = "k" + layer.cluster_id.removeprefix("cluster_")
        nodes = [drawn[m] for m in members if m in drawn]
        box = writer.box_line(box_id, "box-" + layer.cluster_id, layer.path, nodes)
        clusters.append(
            {
                "id": layer.cluster_id,
                "start": layer.start,
                "end": layer.end,
                "members": members,
                "boxId": box_id,
                "box": "  " * layer.indent + box,
            }
        )
    return {
        "lines": lines,
        "clusters": clusters,
        "edges": [[src, dst, attrs] for (src, dst), attrs in writer.edges.items()],
        "nodes": {
            item: node_details(node, writer.kernels.get(node.name)) for item, node in drawn.items()
        },
    }


def _drawn_nodes(g: Graph, writer: _DotWriter) -> dict[str, Node]:
    """DOT id -> node, for every node drawn as its own box (subgraph nodes included)."""
    drawn = {}
    stack = [g]
    while stack:
        for node in stack.pop():
            item = writer.item.get(id(node))
            if item is not None and item.startswith("n"):
                drawn[item] = node
            stack.extend(node.subgraphs.values())
    return drawn


def _typed(tensors) -> list[str]:
    return [f"{t.name}: {type_label(t.type)}" for t in tensors if t is not None]


def node_details(node: Node, kernel: str | None = None) -> dict:
    """What the details panel shows for `node`, and the text search words match.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     y = mdsl.ops.transpose(g.input("x", (2, 3)), perm=(1, 0))
    ...     g.output(y, "y")
    >>> d = node_details(y.producer)
    >>> d["op"], d["attrs"], d["inputs"]
    ('Transpose', ['perm=(1, 0)'], ['x: f32[2,3]'])
    """
    attrs = attr_lines(node)
    outputs = _typed(node.outputs)
    details: dict[str, object] = {
        "name": node.name,
        "op": node.op_type,
        "layer": node.layer,
        "attrs": attrs,
        "inputs": _typed(node.inputs),
        "outputs": outputs,
        "group": node.fusion_group,
        "kernel": kernel,
        "device": node.device,
        "source": node.source,
    }
    words = [node.name, node.op_type, node.layer + "/", *attrs, *outputs]
    words += [node.fusion_group or "", kernel or "", node.device or ""]
    details["search"] = " ".join(words).lower()
    return details


def _json_script(element_id: str, data) -> str:
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")  # no `</script>`
    return f'<script type="application/json" id="{element_id}">{text}</script>'


@functools.lru_cache(maxsize=1)
def _packed_layout_engine() -> str:
    """The vendored Graphviz build, gzip-compressed and base64-encoded (about half its size)."""
    try:
        raw = resources.files("mdsl.tools").joinpath("_vendor").joinpath(LAYOUT_ENGINE).read_bytes()
    except OSError as e:
        raise MdslError(f"the viewer's layout engine {LAYOUT_ENGINE} is missing: {e}") from None
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


@functools.lru_cache(maxsize=1)
def _page_script() -> str:
    return resources.files("mdsl.tools").joinpath("viz_page.js").read_text("utf-8")
