"""Every docstring example in mdsl runs: doctest over every module under `mdsl/`, and over
every op builder exported by `mdsl.ops`.

Builders made by `@mdsl.op_proto` are closures defined in `mdsl/ops/proto.py`; whether a
module scan attributes them to their module depends on doctest's version, so they are also
collected here from `mdsl.ops` and handed to a DocTestFinder one by one.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import pkgutil
import sys

import pytest

import mdsl
import mdsl.ops
from tests.op_sandbox import restored_registries

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _all_module_names() -> list[str]:
    names = ["mdsl"]
    for info in pkgutil.walk_packages(mdsl.__path__, prefix="mdsl."):
        if not info.name.endswith(".__main__"):  # importing it runs the command line
            names.append(info.name)
    return sorted(names)


def _builders() -> dict[str, object]:
    """Public op builders exported by `mdsl.ops`, by exported name (each object once)."""
    found: dict[str, object] = {}
    seen: set[int] = set()
    for name, obj in sorted(vars(mdsl.ops).items()):
        if name.startswith("_") or not hasattr(obj, "opdef") or id(obj) in seen:
            continue
        seen.add(id(obj))
        found[name] = obj
    return found


def _import_all(names: list[str]) -> None:
    """Import every module up front, so that registrations made on import are in place
    before `_sandbox` takes its snapshot (a failing import fails its test below)."""
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


MODULES = _all_module_names()
_import_all(MODULES)
BUILDERS = _builders()


@pytest.fixture(autouse=True)
def _sandbox():
    """Doctests declare example ops (e.g. "Double"); leave the registries as they were."""
    with restored_registries():
        yield


def _run(tests: list[doctest.DocTest]) -> None:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "\n".join(report)


@pytest.mark.parametrize("module_name", MODULES)
def test_module_docstrings(module_name):
    module = importlib.import_module(module_name)
    tests = doctest.DocTestFinder().find(module, module_name)
    _run([t for t in tests if t.examples])


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_op_builder_docstrings(name):
    builder = BUILDERS[name]
    home = sys.modules.get(builder.__module__)
    globs = dict(vars(home)) if home is not None else {}
    tests = doctest.DocTestFinder(recurse=False).find(
        builder, f"mdsl.ops.{name}", module=False, globs=globs
    )
    _run([t for t in tests if t.examples])


def test_builders_are_found():
    """Builders are collected from `mdsl.ops` whatever module a scan attributes them to."""
    assert {"matmul", "reshape", "add", "reduce_sum"} <= set(BUILDERS)
    direct = doctest.DocTestFinder(recurse=False).find(BUILDERS["matmul"], "matmul", module=False)
    assert direct and direct[0].examples
