"""How long laying out ResNet-50's picture takes with each Graphviz the viewer can use.

ResNet-50 is the ONNX light model (445 nodes, weights made random), drawn as the HTML
viewer draws it (`mdsl.viz.dot_writer(..., links=True)`). Contenders, interleaved round by
round so machine load hits them alike:

- `dot`: the system Graphviz, one `dot -Tsvg` process (what `mdsl.viz.render` uses first);
- `wasm-python new process` / `warm`: Graphviz compiled to WebAssembly run by wasmtime in
  Python (the `viz` extra; SVG files without `dot`): a fresh process (the compiled module
  comes from wasmtime's cache; the first process ever compiles it, ~10 s on a busy 2-core
  machine), then a second layout in the same process;
- `page first paint (dot)` / `(page layout)`: opening the HTML page in headless Chromium
  until its picture shows nodes, with the SVG `dot` drew inline, and with none (the page
  lays the graph out with the Viz.js build it carries);
- `page relayout`: the page laying the graph out again (as after collapsing a layer).

Prints medians and spread (min-max) in seconds. Needs onnx, Chromium and Playwright; the
`dot` rows need Graphviz and the wasm rows the `viz` extra.

Run: python benchmarks/viewer_layout.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mdsl
from mdsl.frontends import onnx as onnx_frontend
from mdsl.frontends.onnx_light_models import load_light_model, with_random_weights
from mdsl.tools import viz

COLD_WASM = """
import sys, time
from mdsl.tools import viz
dot = open(sys.argv[1]).read()
start = time.perf_counter()
viz._run_wasm_dot(dot)
print(time.perf_counter() - start)
"""


def resnet50() -> mdsl.Graph:
    return onnx_frontend.load(with_random_weights(load_light_model("resnet50")))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    g = resnet50()
    dot = viz.dot_writer(g, links=True).write()
    work = Path(tempfile.mkdtemp(prefix="mdsl-viewer-bench-"))
    dot_file = work / "resnet50.dot"
    dot_file.write_text(dot)
    pages = {"dot": work / "with-dot.html", "page layout": work / "page-layout.html"}
    if viz.has_dot():
        viz.render(g, pages["dot"])
    else:
        del pages["dot"]
    os.environ["MDSL_DOT"] = "mdsl-no-such-dot"
    viz.render(g, pages["page layout"])
    del os.environ["MDSL_DOT"]
    print(f"ResNet-50: {len(g)} nodes, DOT text {len(dot) // 1024} KiB")

    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {}
    chromium = os.environ.get("MDSL_CHROMIUM") or shutil.which("chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox"])
        for _ in range(args.rounds):
            for name, fn in contenders(dot, dot_file, pages, browser).items():
                times.setdefault(name, []).append(fn())
        browser.close()
    for name, xs in times.items():
        print(f"{name:28s} median {statistics.median(xs):6.2f} s   ({min(xs):.2f}-{max(xs):.2f})")


def contenders(dot: str, dot_file: Path, pages: dict, browser) -> dict:
    found = {}
    if viz.has_dot():
        found["dot"] = lambda: timed(lambda: viz.run_dot(dot, "svg"))
    if viz._wasm_graphviz() is not None:
        viz._run_wasm_dot(dot)  # "warm": the module compiled already
        found["wasm-python new process"] = lambda: float(
            subprocess.run(
                [sys.executable, "-c", COLD_WASM, str(dot_file)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        found["wasm-python warm"] = lambda: timed(lambda: viz._run_wasm_dot(dot))
    for kind, page_file in pages.items():
        found[f"page first paint ({kind})"] = lambda f=page_file: first_paint(browser, f)
    found["page relayout"] = lambda: relayout(browser, pages["page layout"])
    return found


def first_paint(browser, page_file: Path) -> float:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        return timed(
            lambda: (
                page.goto(page_file.as_uri()),
                page.wait_for_selector("#picture svg g.node", timeout=120_000),
            )
        )
    finally:
        page.close()


def relayout(browser, page_file: Path) -> float:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(page_file.as_uri())
        page.wait_for_selector("#picture svg g.node", timeout=120_000)
        return page.evaluate(
            """async () => { const t = performance.now(); await relayout();
                            return (performance.now() - t) / 1000; }"""
        )
    finally:
        page.close()


if __name__ == "__main__":
    main()
