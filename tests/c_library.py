"""A C source compiled and loaded with ctypes, for tests of a template's helpers on their
own (tests/codegen/test_vector_exp.py, tests/runtime/test_packed_gemm_forms.py); and a
generated source compiled by GCC with the target's own flags, for tests of what GCC made
of it (tests/codegen/test_vector_math.py, tests/codegen/test_row_sums.py)."""

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


def gcc_compile(folder: Path, source: str, *extra: str, output: str = "unit.o") -> Path:
    """`source` compiled (not linked) as the C target builds it, plus `extra` flags, into
    `folder / output` (assembly with "-S"); returns the source's path. A skip unless the
    target's compiler is GCC (the tests read GCC's own reports and its code)."""
    from mdsl.codegen.toolchain import default_toolchain

    toolchain = default_toolchain()
    version = subprocess.run([toolchain.cc, "--version"], capture_output=True, text=True).stdout
    if "Free Software Foundation" not in version or "clang" in version:
        pytest.skip("the target's compiler is not GCC")
    path = folder / "unit.c"
    path.write_text(source)
    flags = [f for f in toolchain.flags if f != "-shared"]
    includes = [f"-I{d}" for d in toolchain.include_dirs]
    subprocess.run(
        [toolchain.cc, *flags, *includes, "-c", str(path), "-o", str(folder / output), *extra],
        check=True,
    )
    return path
