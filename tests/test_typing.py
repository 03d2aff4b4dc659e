"""The type check of `make lint` covers the public API: every module `mdsl/__init__.py`
imports names from is in `[tool.mypy] files` (mypy itself runs in `make lint`)."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None


def _checked_files() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is None:
        import pytest

        pytest.skip("tomllib needs Python 3.11")
    return set(tomllib.loads(text)["tool"]["mypy"]["files"])


def _facade_modules() -> set[str]:
    """The modules `mdsl/__init__.py` takes public names from (a submodule imported by
    name counts as itself)."""
    tree = ast.parse((ROOT / "mdsl" / "__init__.py").read_text(encoding="utf-8"))
    modules = set()
    for node in tree.body:
        if not (
            isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mdsl.")
        ):
            continue
        for alias in node.names:
            if (alias.asname or alias.name).startswith("_"):
                continue
            submodule = f"{node.module}.{alias.name}"
            is_module = (ROOT / (submodule.replace(".", "/") + ".py")).exists()
            modules.add(submodule if is_module else node.module)
    return modules


def _path(module: str) -> str:
    base = ROOT / module.replace(".", "/")
    return (
        f"{module.replace('.', '/')}/__init__.py"
        if base.is_dir()
        else f"{module.replace('.', '/')}.py"
    )


def test_every_public_module_is_type_checked():
    files = _checked_files()
    wanted = {_path(m) for m in _facade_modules()}
    missing = sorted(wanted - files)
    assert not missing, f"add to [tool.mypy] files in pyproject.toml: {missing}"
    assert "mdsl/__init__.py" in files and "examples" in files
