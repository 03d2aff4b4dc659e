"""The self-contained HTML page of `mdsl.viz.render(g, "graph.html")`.

One file, nothing fetched: the SVG Graphviz drew (inline), a collapsible layer tree
(`<details>` elements, so it folds without scripts) whose entries jump to their cluster in
the picture, and a table of every node (subgraph nodes included) whose names jump to the
node; clicking a node in the picture jumps to its row. A few lines of inline script add a
filter box over the table.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from mdsl.ir.graph import OUTPUT, Graph, Node
from mdsl.tools.viz import attr_lines, html_text, type_label

if TYPE_CHECKING:
    from mdsl.tools.viz import _DotWriter

OPEN_TREE_DEPTH = 1  # layers at this depth and above start unfolded

_PROLOG = re.compile(r"<\?xml.*?\?>|<!DOCTYPE.*?>|<!--.*?-->", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(:\w+)?="[^"]*"')

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

SCRIPT = """
/* pan and zoom by moving the SVG viewBox; the first view fits the graph width */
const picture = document.getElementById("picture");
const svg = picture.querySelector("svg");
if (svg) {
  const full = svg.viewBox.baseVal;
  const whole = {x: full.x, y: full.y, w: full.width, h: full.height};
  let view = {...whole};
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  const show = () => svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
  const fit = () => {
    const aspect = picture.clientHeight / Math.max(1, picture.clientWidth);
    const w = Math.max(whole.w, whole.h / aspect / 4);  /* tall graphs: a quarter at a time */
    view = {x: whole.x, y: whole.y, w: w, h: w * aspect};
    if (view.h >= whole.h) view = {...whole};
    show();
  };
  const zoom = (factor, cx = 0.5, cy = 0.5) => {
    const w = view.w * factor, h = view.h * factor;
    view = {x: view.x + (view.w - w) * cx, y: view.y + (view.h - h) * cy, w: w, h: h};
    show();
  };
  picture.addEventListener("wheel", e => {
    e.preventDefault();
    const r = picture.getBoundingClientRect();
    zoom(e.deltaY > 0 ? 1.2 : 1 / 1.2, (e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height);
  }, {passive: false});
  let drag = null;
  picture.addEventListener("mousedown", e => { drag = {x: e.clientX, y: e.clientY}; });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", e => {
    if (!drag) return;
    const scale = view.w / picture.clientWidth;
    view.x -= (e.clientX - drag.x) * scale;
    view.y -= (e.clientY - drag.y) * scale;
    drag = {x: e.clientX, y: e.clientY};
    show();
  });
  document.getElementById("fit").addEventListener("click", fit);
  document.getElementById("zoom-in").addEventListener("click", () => zoom(1 / 1.5));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(1.5));
  fit();
}
const box = document.getElementById("filter");
box.addEventListener("input", () => {
  const words = box.value.toLowerCase().split(/\\s+/).filter(Boolean);
  for (const row of document.querySelectorAll("#nodes tbody tr")) {
    const text = row.textContent.toLowerCase();
    row.hidden = !words.every(w => text.includes(w));
  }
});
for (const link of document.querySelectorAll("a[data-layer]")) {
  link.addEventListener("click", () => {
    box.value = link.dataset.layer + "/";
    box.dispatchEvent(new Event("input"));
  });
}
"""


def inline_svg(svg: str) -> str:
    """Graphviz's SVG document as an element to inline in HTML: no XML prolog, doctype,
    comments or namespace declarations (HTML knows SVG's)."""
    body = _PROLOG.sub("", svg)
    return _NAMESPACES.sub("", body).strip()


def html_page(g: Graph, svg: str, writer: _DotWriter) -> str:
    """The page for `g` drawn as `svg` by `writer` (whose DOT ids the links use)."""
    title = html_text(g.name)
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
            '<span class="count">wheel: zoom, drag: pan</span></div>',
            f'<div class="picture" id="picture">{inline_svg(svg)}</div>',
            "<h2>Nodes</h2>",
            '<input id="filter" type="search" placeholder="filter: name, op type, layer, '
            'dtype, group, device">',
            _node_table(g, writer),
            "</main></div>",
            f"<script>{SCRIPT}</script>",
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
