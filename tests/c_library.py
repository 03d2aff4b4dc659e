"""A C source compiled and loaded with ctypes, for tests of a template's helpers on their
own (tests/codegen/test_vector_exp.py, tests/runtime/test_packed_gemm_forms.py)."""

from __future__ import annotations

import ctypes
import shlex
import subprocess
from pathlib import Path

import pytest

from mdsl.codegen.toolchain import find_compiler


def load_c(folder: Path, source: str, flags: list[str]) -> ctypes.CDLL:
    """`source` built with `flags` into a shared library in `folder` and loaded; a skip
    where there is no C compiler."""
    cc = find_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    (folder / "harness.c").write_text(source)
    command = [*shlex.split(cc), *flags, "-fPIC", "-shared", "-std=gnu11", "harness.c"]
    subprocess.run([*command, "-o", "harness.so"], cwd=folder, check=True)
    return ctypes.CDLL(str(folder / "harness.so"))
