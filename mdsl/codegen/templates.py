"""Where each target's code templates live.

In a source checkout they are `csrc/templates/<target>/` at the repository root; an
installed wheel carries a copy inside the package as `mdsl/_templates/<target>/` (made by
`setup.py` at build time). `template_dir` finds whichever this mdsl was loaded from;
`template_environment` is the one Jinja loader every target renders with.

>>> from mdsl.codegen.templates import template_dir
>>> template_dir("c").name, (template_dir("c") / "README.md").is_file()
('c', True)
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from mdsl.codegen.toolchain import trusted_cache_dir
from mdsl.ir.errors import CompileError

if TYPE_CHECKING:  # imported on first use: a compile served by the compile cache renders nothing
    import jinja2

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


@functools.cache  # parsing the templates again costs ~0.1 s per compile
def template_environment(target: str) -> jinja2.Environment:
    """The Jinja environment of `target`'s templates: undefined names are errors, block
    tags leave no blank lines, files keep their trailing newline; compiled templates are
    kept in the build cache (compiling them costs ~0.15 s in every new process)."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir(target))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        bytecode_cache=_compiled_templates(),
    )


def _compiled_templates() -> jinja2.BytecodeCache | None:
    """A cache of compiled templates in the build cache (Jinja keys each entry on the
    template's source and its own version), or None when there is no usable cache."""
    import jinja2

    try:
        folder = trusted_cache_dir() / "templates"
        folder.mkdir(mode=0o700, exist_ok=True)
    except (CompileError, OSError):
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))
