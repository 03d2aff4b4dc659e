"""Old import paths of modules that moved, kept importable (same module object).

Targets became folders (`mdsl.targets.<name>`) and the pieces the op library and the
builder share moved down into `mdsl.ops`. Code written against the old paths keeps
working: `import mdsl.codegen.c_target` yields the very module `mdsl.targets.c.render`,
so attributes set on one (tests monkeypatching) are seen through the other.

>>> import mdsl.codegen.c_target as old, mdsl.targets.c.render as new
>>> old is new
True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "mdsl.codegen.c_target": "mdsl.targets.c.render",
    "mdsl.codegen.c_expr": "mdsl.targets.c.expr",
    "mdsl.codegen.c_control": "mdsl.targets.c.control",
    "mdsl.codegen.custom_c": "mdsl.targets.c.custom",
    "mdsl.runtime.c_backend": "mdsl.targets.c.backend",
    "mdsl.codegen.numba_target": "mdsl.targets.numba.render",
    "mdsl.codegen.numba_expr": "mdsl.targets.numba.expr",
    "mdsl.codegen.numba_control": "mdsl.targets.numba.control",
    "mdsl.runtime.numba_backend": "mdsl.targets.numba.backend",
    "mdsl.runtime.numba_support": "mdsl.targets.numba.support",
    "mdsl.codegen.ascendc": "mdsl.targets.ascendc",
    "mdsl.runtime.python_backend": "mdsl.targets.python.backend",
    "mdsl.builder.apply": "mdsl.ops.apply",
    "mdsl.builder.scopes": "mdsl.ops.scopes",
    "mdsl.builder.tensor_methods": "mdsl.ops.tensor_methods",
    "mdsl.runtime.interpreter": "mdsl.targets.python.interpreter",
    "mdsl.runtime.kernels": "mdsl.targets.python.kernels",
    "mdsl.runtime.control_flow": "mdsl.targets.python.control_flow",
    "mdsl.runtime.feeds": "mdsl.targets.feeds",
    "mdsl.runtime.signatures": "mdsl.targets.signatures",
    "mdsl.codegen.emit": "mdsl.runtime.emit",
    "mdsl.runtime.compare": "mdsl.tools.compare",
}


def _new_name(old: str) -> str | None:
    """Where `old` (a moved module or a submodule of a moved package) lives now."""
    for prefix, new in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return new + old[len(prefix) :]
    return None


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old path to the module at its new path (imported once, shared)."""

    def find_spec(self, fullname, path=None, target=None):
        new = _new_name(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=False)

    def create_module(self, spec):
        module = importlib.import_module(_new_name(spec.name))
        spec.loader_state = module.__spec__  # the import system overwrites it next
        return module

    def exec_module(self, module):
        # already executed under its new name: only give it back its own spec
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
