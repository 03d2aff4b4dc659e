"""Shared fixtures: the test graphs' projects and their emulators, built once per session
(the g++ builds are also cached on disk by content, across sessions)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

from mdsl.targets.ascendc import Emulator, build_project
from mdsl.targets.ascendc.emulate import find_cxx
from tests.codegen.ascendc import graphs

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"

needs_cxx = pytest.mark.skipif(
    find_cxx() is None,
    reason="no C++ compiler (g++/clang++): the AscendC emulation cannot be built",
)


@functools.cache
def project(name: str, **options):
    """The AscendC project of test graph `name` (see graphs.py), planned once."""
    return build_project(getattr(graphs, name)(), **options)


@functools.cache
def emulator(name: str) -> Emulator:
    return Emulator(project(name))


@functools.cache
def example(name: str):
    """An example module from examples/ (imported by path: examples is not a package)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return __import__(name)
