"""Every docstring example in `examples/` runs (the mdsl package has its own doctest run).

Op builders made by `@mdsl.op_proto` are closures whose `__globals__` are not their
module's, so a module scan misses them; they are found by their `opdef` attribute and
run with the module's globals.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.op_sandbox import restored_registries

EXAMPLES = ["examples.resnet_block", "examples.bert", "examples.custom_op"]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _doctests(module) -> list[doctest.DocTest]:
    tests = doctest.DocTestFinder().find(module, module.__name__)
    for name, obj in sorted(vars(module).items()):
        if hasattr(obj, "opdef") and getattr(obj, "__module__", None) == module.__name__:
            tests += doctest.DocTestFinder(recurse=False).find(
                obj, f"{module.__name__}.{name}", module=False, globs=dict(vars(module))
            )
    return [t for t in tests if t.examples]


@pytest.mark.parametrize("module_name", EXAMPLES)
def test_example_docstrings(module_name):
    with restored_registries():  # importing custom_op registers its ops: keep that local
        module = importlib.reload(importlib.import_module(module_name))
        tests = _doctests(module)
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        report: list[str] = []
        for test in tests:
            runner.run(test, out=report.append)
    assert tests, f"{module_name} has no docstring examples"
    assert runner.failures == 0, "\n".join(report)
