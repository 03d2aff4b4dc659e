"""Tests that declare their own ops leave the global registries as they found them.

Other tests (e.g. the op-table coverage check) read the registries, and test order is not
fixed under xdist, so a test's custom ops must not outlive it.
"""

from __future__ import annotations

import contextlib

from mdsl.ops import bindings, registry


@contextlib.contextmanager
def restored_registries():
    """Run the block, then undo every op registration and binding made inside it."""
    ops_before = dict(registry._REGISTRY)
    bindings_before = dict(bindings._TABLE)
    try:
        yield
    finally:
        with registry._LOCK:
            registry._REGISTRY.clear()
            registry._REGISTRY.update(ops_before)
        with bindings._LOCK:
            bindings._TABLE.clear()
            bindings._TABLE.update(bindings_before)
