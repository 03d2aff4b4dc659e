"""The C entry points' FFI module (`mdsl/targets/c/_abi_ffi.py`) is what cffi writes
from `mdsl.targets.c.abi.DECLARATIONS` (regenerate: `python -m mdsl.targets.c.abi`), and
loading the C backend does not import pycparser (25-35 ms of a warm compile)."""

from __future__ import annotations

import subprocess
import sys

from mdsl.targets.c import abi


def test_the_ffi_module_is_written_from_the_declarations(tmp_path):
    abi.write_module(tmp_path / "_abi_ffi.py")
    assert abi.MODULE_PATH.read_text() == (tmp_path / "_abi_ffi.py").read_text(), (
        "mdsl/targets/c/_abi_ffi.py is stale: run `python -m mdsl.targets.c.abi`"
    )


def test_the_c_backend_loads_without_pycparser():
    code = (
        "import sys, mdsl.targets.c.backend as b; "
        "assert b._FFI.typeof('mdsl_callback_t') is not None; "
        "print(sorted(m for m in sys.modules if m.startswith(('pycparser', 'cffi.cparser'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
