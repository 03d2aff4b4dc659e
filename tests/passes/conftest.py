"""Pass tests run in debug mode: the PassManager verifies the graph after every pass."""

from __future__ import annotations

import pytest

from mdsl.passes import manager


@pytest.fixture(autouse=True)
def _debug_passes(monkeypatch):
    monkeypatch.setenv("MDSL_DEBUG", "1")


@pytest.fixture
def restored_passes():
    """Undo pass registrations a test makes (the pass registry is global)."""
    before = dict(manager._REGISTRY)
    yield
    with manager._LOCK:
        manager._REGISTRY.clear()
        manager._REGISTRY.update(before)


@pytest.fixture
def region():
    """`add_region` with the TestRegion op registered for the test only."""
    from tests.op_sandbox import restored_registries
    from tests.passes.checks import add_region, region_op

    with restored_registries():
        region_op()
        yield add_region
