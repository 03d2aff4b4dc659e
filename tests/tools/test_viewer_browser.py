"""The HTML viewer in a real headless browser (Playwright + Chromium) on BERT tiny and
ResNet-50 (the ONNX light model): the picture is visible and readable at first paint, with
the system Graphviz's SVG and with the page's own layout (no `dot`); search marks nodes and
filters the table; a click shows a node's attrs; a click on a layer collapses it into one
box and a click on the box brings it back.

Skips (with the reason) only when Chromium or Playwright is missing; `make test` installs
both, and under CI=true a missing one is a failure."""

import os
import shutil

import pytest

import mdsl
from examples.bert import bert
from mdsl import ops

CHROMIUM = os.environ.get("MDSL_CHROMIUM") or shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
]
LAYOUT_TIMEOUT_MS = 60_000  # the page's own layout of ResNet-50 takes 1-3 s on a loaded machine


def _require(available: bool, reason: str) -> None:
    if available:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must run the browser tests")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    _require(CHROMIUM is not None, "no Chromium (make test installs `chromium`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require(False, "playwright is not installed (it is in the test extra)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def resnet50():
    pytest.importorskip("onnx")
    from mdsl.frontends import onnx as onnx_frontend
    from mdsl.frontends.onnx_light_models import (
        light_model_names,
        load_light_model,
        with_random_weights,
    )

    if "resnet50" not in light_model_names():
        pytest.skip("the installed onnx package ships no light ResNet-50")
    return onnx_frontend.load(with_random_weights(load_light_model("resnet50")))


@pytest.fixture(params=["dot", "browser"])
def layout(request, monkeypatch):
    """Who lays the first picture out: the system Graphviz, or the page itself."""
    if request.param == "dot":
        if shutil.which("dot") is None:
            pytest.skip("Graphviz 'dot' is not installed (`make graphviz` installs it)")
    else:
        monkeypatch.setenv("MDSL_DOT", "mdsl-no-such-dot")
    return request.param


def _open(browser, g, tmp_path):
    page_file = mdsl.viz.render(g, tmp_path / "g.html")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_selector("#picture svg g.node", timeout=LAYOUT_TIMEOUT_MS)
    return page, errors


def _visible_nodes(page) -> list[float]:
    """Heights (px) of the node boxes inside the picture's visible area."""
    return page.evaluate(
        """() => {
          const box = document.getElementById("picture").getBoundingClientRect();
          return [...document.querySelectorAll("#picture svg g.node")].map(
              n => n.getBoundingClientRect()).filter(r =>
              r.width > 4 && r.bottom > box.top && r.top < box.bottom
              && r.right > box.left && r.left < box.right).map(r => r.height);
        }"""
    )


def _node_count(page) -> int:
    return page.locator("#picture svg g.node").count()


def _check_viewer(page, errors, search: str, attr_op: str, attr_text: str, layer: str | None):
    heights = _visible_nodes(page)
    assert len(heights) >= 10, heights  # the graph is on screen, not off it
    assert sorted(heights)[len(heights) // 2] >= 12, heights  # and readable (not a speck)

    page.fill("#filter", search)
    hits = page.locator("#picture svg g.node.hit")
    assert hits.count() >= 1
    assert all(search.lower() in hits.nth(i).text_content().lower() for i in range(hits.count()))
    rows = page.locator("#nodes tbody tr:not([hidden])")
    assert 1 <= rows.count() < page.locator("#nodes tbody tr").count()
    page.fill("#filter", "")

    node = page.locator("#picture svg g.node[id^=node-]").filter(has_text=attr_op).first
    node.click()
    details = page.inner_text("#details")
    assert attr_text in details and attr_op in details, details
    assert page.evaluate("() => location.hash") == ""  # the panel, not a jump to the table
    assert errors == []
    if layer is None:
        return

    before = _node_count(page)
    link = page.locator(f'nav a[data-layer="{layer}"]')
    cluster_id = link.get_attribute("href")[len("#layer-") :]
    link.click()  # the tree brings the layer into view
    page.locator(f"#picture svg g.cluster#layer-{cluster_id} text").first.click()
    box = page.locator(f"#picture svg g.node#box-{cluster_id}")
    box.wait_for(timeout=LAYOUT_TIMEOUT_MS)
    assert _node_count(page) < before
    assert " ops" in box.text_content()
    box.click()
    page.locator(f"#picture svg g.cluster#layer-{cluster_id}").wait_for(timeout=LAYOUT_TIMEOUT_MS)
    assert _node_count(page) == before
    assert errors == []


def test_bert_tiny(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_DOT", "mdsl-no-such-dot")  # the page lays it out (dot: ResNet-50)
    page, errors = _open(browser, bert(2, 64, 4), tmp_path)
    _check_viewer(page, errors, "Softmax", "Softmax", "axis=", "EncoderBlock_1")


def test_resnet50(browser, tmp_path, resnet50, layout):
    page, errors = _open(browser, resnet50, tmp_path)
    assert len(resnet50) > 400
    # collapsing: on the page dot drew (the page's own layout collapses in BERT's test)
    layer = "res3/1" if layout == "dot" else None
    _check_viewer(page, errors, "MaxPool", "Conv", "strides=", layer)


def _small_graph():
    with mdsl.Graph("small") as g:
        x = g.input("x", (1, 8, 16, 16))
        g.output(ops.transpose(ops.relu(x), perm=(0, 1, 3, 2)), "y")
    return g


def test_a_click_on_a_compiled_node_shows_its_kernel(browser, tmp_path):
    with mdsl.Graph("kernels") as g:
        x = g.input("x", (4, 8))
        g.output(ops.relu(ops.transpose(x, perm=(1, 0)) * 2.0), "y")
    exe = mdsl.compile(g, backend="c")
    kernel = next(k.name for k in exe.kernels if "Relu" in k.nodes)
    page, errors = _open(browser, exe, tmp_path)
    page.locator("#picture svg g.node[id^=node-]").filter(has_text="Relu").first.click()
    assert f"{kernel} (pointwise)" in page.inner_text("#details")
    assert errors == []


def test_zoom_buttons_change_the_view(browser, tmp_path):
    page, _ = _open(browser, _small_graph(), tmp_path)
    view = "() => document.querySelector('#picture svg').getAttribute('viewBox')"
    before = page.evaluate(view)
    page.click("#zoom-in")
    after = page.evaluate(view)
    assert float(after.split()[2]) < float(before.split()[2])
    page.click("#fit")
    assert page.evaluate(view) == before
