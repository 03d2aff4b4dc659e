"""The API reference (docs/api, Sphinx autodoc over the docstrings) builds with warnings as
errors, and shows the builders' real signatures."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_api_reference_builds_without_warnings(tmp_path):
    if not os.environ.get("CI"):
        pytest.importorskip("sphinx")  # in the test and docs extras; CI must have it
    out = tmp_path / "html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-W",
            "--keep-going",
            "-d",
            str(tmp_path / "doctrees"),
            str(ROOT / "docs" / "api"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    ops_page = (out / "ops.html").read_text(encoding="utf-8")
    assert 'id="mdsl.ops.softmax"' in ops_page and "axis" in ops_page
    for page, anchor in [
        ("graph.html", "mdsl.Graph"),
        ("compile.html", "mdsl.compile"),
        ("tools.html", "mdsl.compare"),
        ("extend.html", "mdsl.op_proto"),
    ]:
        assert f'id="{anchor}"' in (out / page).read_text(encoding="utf-8"), (page, anchor)
