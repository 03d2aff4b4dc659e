"""Build hook: the wheel carries `csrc/templates` inside the package as `mdsl/_templates`.

Everything else about the package is declared in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATES = Path(__file__).resolve().parent / "csrc" / "templates"


class BuildPyWithTemplates(build_py):
    """`build_py` that also copies the codegen templates into the built package."""

    def run(self):
        super().run()
        if not TEMPLATES.is_dir():
            raise FileNotFoundError(f"{TEMPLATES} is missing: the wheel needs the templates")
        target = Path(self.build_lib) / "mdsl" / "_templates"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(TEMPLATES, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithTemplates})
