"""Fixtures for tool tests: registrations (ops, passes) that do not outlive their test,
and the Graphviz requirement of the tests that render pictures."""

from __future__ import annotations

import shutil

import pytest

from mdsl.passes import manager
from tests.op_sandbox import restored_registries

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None,
    reason="Graphviz 'dot' is not installed (`make graphviz` installs it; `make test` does)",
)


@pytest.fixture
def sandbox():
    """Op prototypes and bindings registered inside the test are undone after it."""
    with restored_registries():
        yield


@pytest.fixture
def restored_passes():
    """Passes registered inside the test are undone after it."""
    before = dict(manager._REGISTRY)
    yield
    with manager._LOCK:
        manager._REGISTRY.clear()
        manager._REGISTRY.update(before)
