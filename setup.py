"""Build hook: the wheel carries `csrc/templates` inside the package as `mdsl/_templates`.

Everything else about the package is declared in pyproject.toml. Build scratch (`build/`,
`mdsl.egg-info`) goes to a temporary folder, so building a wheel leaves the checkout clean.
"""

import atexit
import shutil
import tempfile
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


SCRATCH = tempfile.mkdtemp(prefix="mdsl-build-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)

setup(
    cmdclass={"build_py": BuildPyWithTemplates},
    options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}},
)
