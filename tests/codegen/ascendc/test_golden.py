"""Golden AscendC projects for three small graphs: a refactor of the templates or the
planner shows up as a diff of these files. Regenerate them on purpose with
`MDSL_UPDATE_GOLDEN=1 pytest tests/codegen/ascendc/test_golden.py` and review the diff."""

from __future__ import annotations

import difflib
import os

import pytest

from mdsl.targets.ascendc import build_project
from tests.codegen.ascendc import golden_graphs as graphs
from tests.codegen.ascendc.conftest import REPO

GOLDEN_DIR = REPO / "tests" / "golden" / "ascendc"
UPDATE = os.environ.get("MDSL_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("name", graphs.GOLDEN)
def test_generated_project_matches_golden(name, monkeypatch):
    monkeypatch.chdir(REPO)  # source lines in the files are relative to the checkout
    files = build_project(getattr(graphs, name)()).files
    folder = GOLDEN_DIR / name
    if UPDATE:
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    stored = {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}
    assert sorted(stored) == sorted(files), (
        "files added or removed; regenerate with MDSL_UPDATE_GOLDEN=1"
    )
    for rel, text in files.items():
        if text != stored[rel]:
            diff = "".join(
                difflib.unified_diff(
                    stored[rel].splitlines(True),
                    text.splitlines(True),
                    f"golden/{rel}",
                    f"generated/{rel}",
                )
            )
            pytest.fail(f"{name}/{rel} differs from the golden file:\n{diff[:6000]}")


@pytest.mark.parametrize("name", graphs.GOLDEN)
def test_golden_projects_keep_their_kernels_on_the_device(name):
    project = build_project(getattr(graphs, name)())
    assert project.kernels and not project.host_kernels and not project.diagnostics
