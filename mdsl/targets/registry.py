"""The targets mdsl builds and emits for, by name: the one table `mdsl.compile`, `mdsl.emit`,
`mdsl.compare`, profiling, pass bisection, heterogeneous execution and the CLI ask, so
none of them names a target.

A target is a class with

- `name`: what users pass as `backend=` / `target=`;
- `symbolic`: whether one build serves every shape signature (`build(graph, {}, ...)`);
- `fuses`: whether its kernels follow the graph's fusion groups (pass bisection then
  narrows a bad pass down to one group);
- `build(graph, symbols, threads) -> Variant` (a target that only writes files has none);
- `emit_files(graph) -> {relative file name: text or bytes}` for `mdsl.emit` (optional);
- optionally `unavailable() -> str | None` (why it cannot build on this machine) and
  `fallback`, the target `mdsl.compile` uses instead, with a warning;
- optionally `load_variant(graph, symbols, sources, library_path, threads)`, a variant
  of a saved executable (`mdsl.load_executable`), for variants with a `library_path`.

`emit_files`, `unavailable` and `load_variant` are called on the class (static methods:
they need no toolchain).
It is constructed as `cls(march_native=...)`, or `cls()` when it takes no options. A
Variant (one compiled build) has `plan` (None when there is no Kernel IR), `sources`,
`run(env) -> outputs`, `kernel_infos() -> [KernelInfo]` and, to be profiled,
`run_profiled(env) -> (outputs, timings)` with one (start, duration) row per kernel of
`plan.all_kernels()` (when `plan` is None: per node but inputs, constants and outputs).

Built-in targets are registered by module path here and imported on first use (numba
loads only when asked for); `register_target(cls)` adds one more.

>>> from mdsl.targets.registry import target_class, target_names
>>> target_names("build"), target_names("emit")
(['c', 'numba', 'python'], ['ascendc', 'c', 'numba'])
>>> target_class("c").fuses, target_class("python").symbolic
(True, True)
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Protocol

from mdsl.ir.errors import CompileError

_BUILTIN = {
    "c": "mdsl.targets.c.target:CTarget",
    "numba": "mdsl.targets.numba.target:NumbaTarget",
    "python": "mdsl.targets.python.target:PythonTarget",
    "ascendc": "mdsl.targets.ascendc.target:AscendcTarget",
}
_TARGETS: dict[str, type | str] = dict(_BUILTIN)  # name -> class, or "module:Class" to import
_CAPABILITIES = {"build": "build", "emit": "emit_files"}


class Target(Protocol):
    """A target object that builds (what `make_target` returns; see the module docstring)."""

    name: str

    def build(self, graph: Any, symbols: dict, threads: int | None) -> Any: ...


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """One kernel of a compiled variant: its name, kind and the nodes it computes."""

    name: str
    kind: str
    nodes: tuple[str, ...]


def register_target(cls: type) -> type:
    """Make target class `cls` usable by name (`mdsl.compile(g, backend=cls.name)`, ...);
    returns `cls`, so it works as a class decorator."""
    name = getattr(cls, "name", None)
    if not isinstance(cls, type) or not isinstance(name, str) or not name.isidentifier():
        raise CompileError(f"register_target takes a class with an identifier `name`, got {cls!r}")
    if not any(callable(getattr(cls, m, None)) for m in _CAPABILITIES.values()):
        raise CompileError(f"target {name!r} has neither build(...) nor emit_files(graph)")
    _TARGETS[name] = cls
    return cls


def unregister_target(name: str) -> None:
    """Forget target `name` (a built-in one comes back as it was)."""
    _TARGETS.pop(name, None)
    if name in _BUILTIN:
        _TARGETS[name] = _BUILTIN[name]


def target_names(can: str | None = None) -> list[str]:
    """Registered target names, sorted; `can="build"` or `"emit"`: only those that can."""
    if can is None:
        return sorted(_TARGETS)
    if can not in _CAPABILITIES:
        raise CompileError(f"target_names: can= is 'build' or 'emit', got {can!r}")
    return [n for n in sorted(_TARGETS) if _has(target_class(n), can)]


def target_class(name: str) -> type[Any]:
    """The class of target `name` (imported on first use); CompileError naming the known
    targets when there is none."""
    found = _TARGETS.get(name) if isinstance(name, str) else None
    if found is None:
        raise CompileError(
            f"unknown target {name!r}; expected one of {', '.join(sorted(_TARGETS))}"
        )
    if isinstance(found, str):
        module, _, attr = found.partition(":")
        found = _TARGETS[name] = getattr(importlib.import_module(module), attr)
    return found


def make_target(name: str, *, march_native: bool = True) -> Target:
    """A target object of `name`, given the options its class takes."""
    cls = target_class(name)
    accepts = inspect.signature(cls).parameters
    return cls(march_native=march_native) if "march_native" in accepts else cls()


def can(name: str, what: str) -> bool:
    """Whether target `name` is registered and can `what` ("build" or "emit")."""
    return name in _TARGETS and _has(target_class(name), what)


def _has(cls: type, capability: str) -> bool:
    return callable(getattr(cls, _CAPABILITIES[capability], None))
