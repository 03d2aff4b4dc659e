"""The HTML viewer in a real headless browser (Playwright + Chromium): the picture is
visible at first paint, nodes carry their attrs, search filters the table and a click on a
node shows its row. Skips (with the reason) when Chromium or Playwright is missing; `make
test` installs both."""

import os
import shutil

import pytest

import mdsl
from mdsl import ops
from tests.tools.conftest import needs_dot

CHROMIUM = os.environ.get("MDSL_CHROMIUM") or shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
]

pytestmark = [
    needs_dot,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (make test installs `chromium`)"),
]


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def _resnet_like(blocks: int):
    @mdsl.layer
    def conv_bn_relu(x, c):
        w = mdsl.param("w", (c, x.shape[1], 3, 3))
        y = ops.conv(x, w, strides=1, pads=1)
        y = ops.batch_norm(
            y,
            mdsl.param("g", (c,), init="ones"),
            mdsl.param("b", (c,), init="zeros"),
            mdsl.param("m", (c,), init="zeros"),
            mdsl.param("v", (c,), init="ones"),
        )
        return ops.relu(y)

    @mdsl.layer(name="Block")
    def block(x):
        return ops.relu(conv_bn_relu(conv_bn_relu(x, 8), 8) + x)

    with mdsl.Graph("resnet_like") as g:
        x = g.input("x", (1, 8, 16, 16))
        for _ in range(blocks):
            x = block(x)
        g.output(ops.transpose(ops.global_average_pool(x), perm=(0, 1, 3, 2)), "y")
    return g


def test_first_paint_shows_nodes_and_a_click_shows_attrs(browser, tmp_path):
    page_file = mdsl.viz.render(_resnet_like(16), tmp_path / "g.html")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(page_file.as_uri())
    visible = page.evaluate(
        """() => {
          const box = document.getElementById("picture").getBoundingClientRect();
          return [...document.querySelectorAll("svg g.node")].filter(n => {
            const r = n.getBoundingClientRect();
            return r.width > 4 && r.bottom > box.top && r.top < box.bottom
                   && r.right > box.left && r.left < box.right;
          }).length;
        }"""
    )
    assert visible >= 10, visible
    page.fill("#filter", "Transpose")
    shown = page.locator("#nodes tbody tr:not([hidden])")
    assert shown.count() == 1 and "perm=(0, 1, 3, 2)" in shown.inner_text()
    page.fill("#filter", "")
    node = page.locator("svg g.node").filter(has_text="Conv").first
    node.locator("a").first.click()
    target = page.evaluate("() => location.hash")
    assert target.startswith("#row-")
    row = page.locator(target)
    assert "strides=(1, 1)" in row.inner_text() and "Conv" in row.inner_text()


def test_zoom_buttons_change_the_view(browser, tmp_path):
    page_file = mdsl.viz.render(_resnet_like(2), tmp_path / "g.html")
    page = browser.new_page()
    page.goto(page_file.as_uri())
    before = page.evaluate("() => document.querySelector('#picture svg').getAttribute('viewBox')")
    page.click("#zoom-in")
    after = page.evaluate("() => document.querySelector('#picture svg').getAttribute('viewBox')")
    assert float(after.split()[2]) < float(before.split()[2])
    page.click("#fit")
    assert (
        page.evaluate("() => document.querySelector('#picture svg').getAttribute('viewBox')")
        == before
    )
