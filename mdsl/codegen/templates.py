"""Where each target's code templates live.

In a source checkout they are `csrc/templates/<target>/` at the repository root; an
installed wheel carries a copy inside the package as `mdsl/_templates/<target>/` (made by
`setup.py` at build time). `template_dir` finds whichever this mdsl was loaded from.

>>> from mdsl.codegen.templates import template_dir
>>> template_dir("c").name, (template_dir("c") / "README.md").is_file()
('c', True)
"""

from __future__ import annotations

from pathlib import Path

from mdsl.ir.errors import CompileError

TARGETS = ("c", "numba", "ascendc")

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # .../mdsl
_INSTALLED = _PACKAGE_DIR / "_templates"  # inside a wheel
_CHECKOUT = _PACKAGE_DIR.parent / "csrc" / "templates"  # in a source checkout


def template_dir(target: str) -> Path:
    """The folder holding the templates of `target` ("c", "numba" or "ascendc")."""
    if target not in TARGETS:
        raise CompileError(
            f"unknown codegen target {target!r}; expected one of {', '.join(TARGETS)}"
        )
    for root in (_INSTALLED, _CHECKOUT):
        folder = root / target
        if folder.is_dir():
            return folder
    raise CompileError(
        f"templates for target {target!r} not found in {_INSTALLED} or {_CHECKOUT}; "
        "reinstall mdsl (the wheel ships them) or restore csrc/templates in the checkout"
    )
