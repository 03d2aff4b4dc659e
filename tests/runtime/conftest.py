"""Fixtures for runtime tests: custom ops and bindings that do not outlive their test."""

from __future__ import annotations

import pytest

from tests.op_sandbox import restored_registries


@pytest.fixture
def sandbox():
    """Op prototypes and bindings registered inside the test are undone after it."""
    with restored_registries():
        yield
