"""The documentation runs: every ```python block of README.md as pasted (each on its own),
and the pages under docs/ listed in DOC_PAGES (a page's blocks in order, sharing names)."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
DOC_PAGES = [
    "docs/tutorial.md",
    "docs/custom-ops.md",
    "docs/passes.md",
    "docs/dynamic-shapes.md",
]


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


README_BLOCKS = python_blocks(ROOT / "README.md")


def _run(source: str, name: str, namespace: dict) -> None:
    exec(compile(source, name, "exec"), namespace)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # snippets write files (m.mdsl, trace.json, build/...)
    return tmp_path


def test_the_readme_has_snippets():
    assert len(README_BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(README_BLOCKS)))
def test_readme_snippet_runs_as_pasted(index, in_tmp, capsys):
    if "import torch" in README_BLOCKS[index]:
        pytest.importorskip("torch")
    if "viz.render" in README_BLOCKS[index] and not _has_dot():
        pytest.skip("Graphviz `dot` is not installed (make test installs it)")
    _run(README_BLOCKS[index], f"README.md[{index}]", {"__name__": "__readme__"})


@pytest.mark.parametrize("page", DOC_PAGES)
def test_doc_page_runs(page, in_tmp, capsys):
    blocks = python_blocks(ROOT / page)
    assert blocks, f"{page} has no python blocks"
    namespace = {"__name__": "__doc_page__"}
    for i, block in enumerate(blocks):
        _run(block, f"{page}[{i}]", namespace)


def _has_dot() -> bool:
    import shutil

    return bool(os.environ.get("MDSL_DOT") or shutil.which("dot"))
