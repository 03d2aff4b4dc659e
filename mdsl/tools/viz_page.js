/* The mdsl graph viewer: pan and zoom, node details, layer collapsing, search.

The page carries the graph's DOT text as a model (#mdsl-model: its lines, the line range
of every layer cluster, the edges, each node's details). Collapsing a layer replaces its
lines by one box, points its edges at the box and lays the graph out again with the
Graphviz build the page carries (#mdsl-layout-engine, gzip + base64, decoded on first use).
A page written without a system Graphviz lays out the first picture that way too. */
"use strict";
const model = JSON.parse(document.getElementById("mdsl-model").textContent);
const picture = document.getElementById("picture");
const panel = document.getElementById("details");
const status = document.getElementById("status");
const box = document.getElementById("filter");
const collapsed = new Set();  /* cluster ids drawn as one box */
let whole = null, view = null, engine = null, selected = null;

/* -- layout ------------------------------------------------------------------------- */
async function layoutEngine() {
  if (!engine) {
    const packed = document.getElementById("mdsl-layout-engine").textContent.trim();
    const bytes = Uint8Array.from(atob(packed), c => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    new Function(await new Response(stream).text())();  /* defines globalThis.Viz */
    engine = await globalThis.Viz.instance();
  }
  return engine;
}

function dotText() {
  const starts = new Map(model.clusters.map(c => [c.start, c]));
  const alias = {}, out = [];
  for (let i = 0; i < model.lines.length;) {
    const c = starts.get(i);
    if (c && collapsed.has(c.id)) {
      out.push(c.box);
      for (const m of c.members) alias[m] = c.boxId;
      i = c.end;
    } else {
      out.push(model.lines[i++]);
    }
  }
  const seen = new Set();
  for (const [src, dst, attrs] of model.edges) {
    const a = alias[src] || src, b = alias[dst] || dst;
    if (a === b || seen.has(a + " " + b)) continue;
    seen.add(a + " " + b);
    out.push(`  ${a} -> ${b}${attrs};`);
  }
  out.push("}");
  return out.join("\n");
}

async function relayout(focusId) {
  status.textContent = "laying out…";
  const started = performance.now();
  const svg = (await layoutEngine()).renderSVGElement(dotText());
  install(svg, focusId);
  status.textContent = `laid out in ${Math.round(performance.now() - started)} ms`;
}

/* -- the picture and its view ------------------------------------------------------- */
function install(svg, focusId) {
  picture.replaceChildren(svg);
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  const b = svg.viewBox.baseVal;
  const scale = view ? view.w / picture.clientWidth : null;
  whole = {x: b.x, y: b.y, w: b.width, h: b.height};
  fit();
  const target = focusId && document.getElementById(focusId);
  if (target && scale) focus(target, scale);
  markMatches();
}

const currentSvg = () => picture.querySelector("svg");
const show = () => currentSvg().setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);

/* the whole width, at natural size (one picture unit per pixel) when the graph is taller */
function fit() {
  const pw = picture.clientWidth, ph = picture.clientHeight;
  const scale = Math.max(whole.w / pw, Math.min(1, whole.h / ph));
  const w = pw * scale, h = ph * scale;
  const y = h >= whole.h ? whole.y - (h - whole.h) / 2 : whole.y;
  view = {x: whole.x - (w - whole.w) / 2, y: y, w: w, h: h};
  show();
}

function zoom(factor, cx = 0.5, cy = 0.5) {
  const w = view.w * factor, h = view.h * factor;
  view = {x: view.x + (view.w - w) * cx, y: view.y + (view.h - h) * cy, w: w, h: h};
  show();
}

/* centre `element` at `scale` picture units per screen pixel (default: it fills the view) */
function focus(element, scale) {
  const p = picture.getBoundingClientRect(), r = element.getBoundingClientRect();
  const now = view.w / p.width;
  const cx = view.x + (r.left + r.width / 2 - p.left) * now;
  const cy = view.y + (r.top + r.height / 2 - p.top) * now;
  if (!scale) scale = Math.max(1, 1.1 * Math.max(r.width / p.width, r.height / p.height)) * now;
  const w = p.width * scale, h = p.height * scale;
  view = {x: cx - w / 2, y: cy - h / 2, w: w, h: h};
  show();
}

picture.addEventListener("wheel", e => {
  e.preventDefault();
  const r = picture.getBoundingClientRect();
  zoom(e.deltaY > 0 ? 1.2 : 1 / 1.2, (e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height);
}, {passive: false});
let drag = null, dragged = false;
picture.addEventListener("mousedown", e => { drag = {x: e.clientX, y: e.clientY}; dragged = false; });
window.addEventListener("mouseup", () => { drag = null; });
window.addEventListener("mousemove", e => {
  if (!drag || !view) return;
  if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 2) dragged = true;
  const scale = view.w / picture.clientWidth;
  view.x -= (e.clientX - drag.x) * scale;
  view.y -= (e.clientY - drag.y) * scale;
  drag = {x: e.clientX, y: e.clientY};
  show();
});
document.getElementById("fit").addEventListener("click", fit);
document.getElementById("zoom-in").addEventListener("click", () => zoom(1 / 1.5));
document.getElementById("zoom-out").addEventListener("click", () => zoom(1.5));
document.getElementById("expand-all").addEventListener("click", () => {
  if (collapsed.size) { collapsed.clear(); relayout(); }
});

/* -- clicks: a node shows its details, a layer collapses, a collapsed box expands ----- */
picture.addEventListener("click", e => {
  if (dragged) { e.preventDefault(); return; }
  const node = e.target.closest("g.node"), cluster = e.target.closest("g.cluster");
  if (node && node.id.startsWith("box-")) {
    e.preventDefault();
    toggle(node.id.slice(4));
  } else if (node && node.id.startsWith("node-")) {
    e.preventDefault();
    showDetails(node.id.slice(5), node);
  } else if (!node && cluster && cluster.id.startsWith("layer-cluster_")) {
    e.preventDefault();
    toggle(cluster.id.slice(6));
  }
});

function toggle(clusterId) {
  const closing = !collapsed.has(clusterId);
  if (closing) collapsed.add(clusterId); else collapsed.delete(clusterId);
  relayout((closing ? "box-" : "layer-") + clusterId);
}

const DETAIL_ROWS = [
  ["node", "name"], ["op", "op"], ["layer", "layer"], ["attrs", "attrs"], ["inputs", "inputs"],
  ["outputs", "outputs"], ["fusion group", "group"], ["kernel", "kernel"], ["device", "device"],
  ["built at", "source"],
];

function showDetails(nodeId, element) {
  const d = model.nodes[nodeId];
  if (!d) return;
  if (selected) selected.classList.remove("selected");
  selected = element;
  element.classList.add("selected");
  const table = document.createElement("table");
  for (const [label, key] of DETAIL_ROWS) {
    const value = d[key];
    if (value === undefined || value === null || value === "" || (Array.isArray(value) && !value.length)) continue;
    const row = table.insertRow();
    row.insertCell().textContent = label;
    const cell = row.insertCell();
    cell.className = key;
    for (const line of [].concat(value)) {
      const div = document.createElement("div");
      div.textContent = line;
      cell.appendChild(div);
    }
  }
  const link = document.createElement("a");
  link.href = "#row-" + nodeId;
  link.textContent = "row in the node table";
  panel.replaceChildren(table, link);
}

/* -- search: filters the table and marks the matching nodes in the picture ---------- */
const words = () => box.value.toLowerCase().split(/\s+/).filter(Boolean);
const matches = (text, ws) => ws.every(w => text.includes(w));

function markMatches() {
  const ws = words();
  let hits = 0;
  for (const g of picture.querySelectorAll("g.node[id^=node-]")) {  /* not layer boxes */
    const d = model.nodes[g.id.slice(5)];
    const hit = ws.length > 0 && d !== undefined && matches(d.search, ws);
    g.classList.toggle("hit", hit);
    g.classList.toggle("dim", ws.length > 0 && !hit);
    hits += hit;
  }
  if (ws.length) status.textContent = `${hits} nodes in the picture match`;
}

box.addEventListener("input", () => {
  const ws = words();
  for (const row of document.querySelectorAll("#nodes tbody tr")) {
    row.hidden = !matches(row.textContent.toLowerCase(), ws);
  }
  markMatches();
  const first = picture.querySelector("g.node.hit");
  if (first && view) focus(first, view.w / picture.clientWidth);
});
/* a layer in the tree: its nodes in the table, its cluster (or box) in the view */
for (const link of document.querySelectorAll("a[data-layer]")) {
  link.addEventListener("click", e => {
    box.value = link.dataset.layer + "/";
    box.dispatchEvent(new Event("input"));
    const id = link.hash.slice(1);
    const target = document.getElementById(id)
        || document.getElementById(id.replace(/^layer-/, "box-"));
    if (target && picture.contains(target)) {
      e.preventDefault();
      focus(target);
      picture.scrollIntoView({block: "nearest"});
    }
  });
}

/* -- first paint -------------------------------------------------------------------- */
if (currentSvg()) {
  install(currentSvg());
  /* ready the layout engine while the reader looks, so the first collapse is quick */
  (window.requestIdleCallback || setTimeout)(() => layoutEngine().catch(() => {}));
} else {
  relayout().catch(e => { status.textContent = "could not lay the graph out: " + e; });
}
