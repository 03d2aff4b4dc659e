"""Settings for the whole suite."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_compile_cache(monkeypatch):
    """Tests see every compile's work: many patch a planner or renderer and compile, which
    a whole-compile cache hit would skip (`mdsl.runtime.compile_cache`).
    tests/runtime/test_compile_cache.py turns the cache on for its own tests."""
    monkeypatch.setenv("MDSL_COMPILE_CACHE", "0")
