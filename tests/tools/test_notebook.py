"""Notebook reprs: one-line __repr__ and HTML tables for graphs, nodes, tensors and reports."""

import html.parser

import numpy as np

import mdsl
from mdsl import ops


class _Checker(html.parser.HTMLParser):
    """Collects the text of cells and checks tags are balanced (well-formed HTML)."""

    VOID = {"br", "img", "meta", "path", "polygon", "ellipse", "polyline", "text"}

    def __init__(self):
        super().__init__()
        self.stack, self.cells = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag not in self.VOID:
            assert self.stack and self.stack.pop() == tag, tag

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "td":
            self.cells.append(data)


def _cells(markup: str) -> list[str]:
    checker = _Checker()
    checker.feed(markup)
    checker.close()
    assert not [t for t in checker.stack if t in ("table", "div", "tr", "td")]
    return checker.cells


def _graph():
    @mdsl.layer(name="Head")
    def head(x):
        return ops.softmax(x @ mdsl.param("w", (4, 3)), axis=-1)

    with mdsl.Graph("nb") as g:
        g.output(head(g.input("x", ("N", 4))), "y")
    return g


def test_graph_node_and_tensor_render_as_tables():
    g = _graph()
    cells = _cells(g._repr_html_())
    assert cells[:4] == ["input", "x", "float32", "[N, 4]"]
    assert "Softmax" in cells and "Head" in cells
    node = g.node("Head/Softmax")
    node_cells = _cells(node._repr_html_())
    assert node_cells[node_cells.index("axis") + 1] == "-1"
    assert "tests/tools/test_notebook.py" in node_cells[node_cells.index("source") + 1]
    tensor_cells = _cells(node.output._repr_html_())
    assert tensor_cells[tensor_cells.index("producer") + 1] == "Head/Softmax (Softmax)"
    for obj in (g, node, node.output):
        assert "\n" not in repr(obj)


def test_reports_render_as_tables_and_repr_in_one_line():
    g = _graph()
    feeds = {"x": np.ones((2, 4), np.float32)}
    rep = mdsl.compare(g, feeds, backend="python", reference="python")
    assert repr(rep).startswith("CompareReport(compare 'python' against 'python'")
    assert "Head/Softmax" in " ".join(_cells(rep._repr_html_()))
    prof = mdsl.compile(g, backend="python").profile(feeds, runs=2)
    assert repr(prof).startswith("Profile('nb', python: 2 runs,") and "\n" not in repr(prof)
    assert "Softmax" in _cells(prof._repr_html_())
    d = mdsl.diff(g, mdsl.optimize(g, level=2))
    assert "\n" not in repr(d)
    _cells(d._repr_html_())


def test_cells_are_escaped():
    with mdsl.Graph("<b>") as g:
        g.output(ops.relu(g.input("<x>", (2,))), "y")
    markup = g._repr_html_()
    assert "&lt;x&gt;" in markup and "<x>" not in markup.split("<svg")[0]


def test_the_pass_log_prints_one_line_per_run_and_repr_in_one_line():
    with mdsl.Graph("logged") as g:
        x = g.input("x", (2, 2))
        g.output(ops.relu(x + 0.0), "y")
    log = mdsl.optimize(g).pass_log
    text = str(log)
    assert "PassLogEntry(" not in text and "PassLogEntry(" not in repr(log)
    lines = text.splitlines()
    assert len(lines) == len(log) + 1  # one per run, then the totals
    assert any(line.startswith("* simplify") and "5 -> 3 nodes" in line for line in lines)
    assert lines[-1].startswith(f"{len(log)} runs, {len(log.changed())} changed")
    assert "\n" not in repr(log) and "changed: simplify" in repr(log)
    cells = _cells(log._repr_html_())
    assert "simplify" in cells and "5 → 3" in cells
    assert repr(g.pass_log) == "PassLog(0 runs, nothing changed; 0 us)"
