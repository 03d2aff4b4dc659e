"""The entry points every generated library exports, declared for cffi, and the module
that carries these declarations compiled (`_abi_ffi.py`, written by `write_module`).

Why a written module: an FFI built at import (`cffi.FFI().cdef(...)`) parses the
declarations with pycparser, whose import alone took 25-35 ms of a warm BERT-base
compile (its lexer builds large regular expressions). cffi's out-of-line ABI mode
stores the parsed declarations in a small Python module; loading it needs only cffi's C
backend, and the C backend parses the type strings the calls use (`"void *[]"`).
`tests/targets/test_c_abi.py` checks that `_abi_ffi.py` is what `write_module` writes
from `DECLARATIONS` with the installed cffi. Regenerate it after editing them:

    python -m mdsl.targets.c.abi
"""

from __future__ import annotations

from pathlib import Path

MODULE = "mdsl.targets.c._abi_ffi"
MODULE_PATH = Path(__file__).with_name("_abi_ffi.py")

DECLARATIONS = """
    typedef int (*mdsl_callback_t)(int index, void **buffers);
    int mdsl_run(void *const *inputs, void *const *outputs, const void *const *consts,
                 char *arena, mdsl_callback_t callback);
    int mdsl_run_profile(void *const *inputs, void *const *outputs, const void *const *consts,
                         char *arena, mdsl_callback_t callback, double *timings);
    int mdsl_run_dims(void *const *inputs, void *const *outputs, const void *const *consts,
                      char *arena, mdsl_callback_t callback, int64_t *dims,
                      const int64_t *offsets);
    int mdsl_run_dims_profile(void *const *inputs, void *const *outputs,
                              const void *const *consts, char *arena, mdsl_callback_t callback,
                              int64_t *dims, const int64_t *offsets, double *timings);
    void mdsl_set_threads(int n);
"""


HEADER = "# Written by `python -m mdsl.targets.c.abi` from its DECLARATIONS: do not edit.\n"


def write_module(path: Path = MODULE_PATH) -> None:
    """Write the out-of-line FFI module for `DECLARATIONS` to `path`."""
    import io

    import cffi

    builder = cffi.FFI()
    builder.cdef(DECLARATIONS)
    builder.set_source(MODULE, None)
    text = io.StringIO()
    builder.emit_python_code(text)
    path.write_text(HEADER + text.getvalue())


if __name__ == "__main__":
    write_module()
