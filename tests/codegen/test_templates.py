"""`mdsl.codegen.templates.template_dir`: templates are found from a source checkout and
from an installed wheel (setup.py copies csrc/templates into the package)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import mdsl
from mdsl.codegen.templates import TARGETS, template_dir

REPO = Path(__file__).resolve().parents[2]
# what a wheel is built from (build outputs and caches excluded)
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "mdsl", "csrc")


@pytest.mark.parametrize("target", TARGETS)
def test_checkout_templates_are_found(target):
    folder = template_dir(target)
    assert folder == REPO / "csrc" / "templates" / target
    assert (folder / "README.md").is_file()


@pytest.mark.parametrize("target", ["cuda", "C", "", None])
def test_unknown_target(target):
    with pytest.raises(mdsl.CompileError, match="unknown codegen target"):
        template_dir(target)


def test_compiled_templates_are_kept_in_the_build_cache(tmp_path, monkeypatch):
    from mdsl.codegen import templates

    monkeypatch.setenv("MDSL_CACHE_DIR", str(tmp_path / "cache"))
    env = templates.template_environment.__wrapped__("c")
    env.get_template("runtime.h.j2")
    assert list((tmp_path / "cache" / "templates").iterdir())  # written on first use
    again = templates.template_environment.__wrapped__("c")  # a new process's environment
    assert again.get_template("runtime.h.j2").render  # loads from the cache
    (tmp_path / "cache").chmod(0o777)  # another user could plant compiled templates
    try:
        assert templates.template_environment.__wrapped__("c").bytecode_cache is None
    finally:
        (tmp_path / "cache").chmod(0o700)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout (so no build/ folder lands in the repo)."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        elif path.exists():
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*cmd, "-q", "-w", str(out)], cwd=src, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("mdsl-*.whl")
    return built


@pytest.mark.slow
def test_wheel_ships_the_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for target in TARGETS:
        assert f"mdsl/_templates/{target}/README.md" in names
    assert "mdsl/codegen/templates.py" in names
    assert not any(n.startswith("csrc/") for n in names)


@pytest.mark.slow
def test_installed_wheel_finds_its_own_templates(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import mdsl, mdsl.codegen.templates as t;"
        "print(mdsl.__file__);"
        "print(t.template_dir('ascendc'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,  # not the checkout: the extracted wheel must be what is imported
        env={"PYTHONPATH": str(site), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    package_file, folder = result.stdout.split()
    assert Path(package_file).is_relative_to(site)
    assert Path(folder) == site / "mdsl" / "_templates" / "ascendc"
    assert (Path(folder) / "README.md").read_text() == (
        REPO / "csrc" / "templates" / "ascendc" / "README.md"
    ).read_text()
