"""Builds `hand_kernels.c` (gcc -O3 -march=native) and loads it through cffi."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import cffi
import numpy as np

SOURCE = Path(__file__).with_name("hand_kernels.c")
FLAGS = (
    "-O3",
    "-march=native",
    "-fopenmp",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fPIC",
    "-shared",
)

_FFI = cffi.FFI()
_FFI.cdef(
    """
    void hc_set_threads(int n);
    void hc_noop(void);
    void hc_w1(const float *x, float *y, int64_t n, float a, float b);
    void hc_w1_libm(const float *x, float *y, int64_t n, float a, float b);
    void hc_layer_norm(const float *x, const float *gamma, const float *beta, float *y,
                       int64_t rows, int64_t cols, float eps);
    void hc_softmax(const float *x, float *y, int64_t rows, int64_t cols);
    void hc_triad(float *a, const float *b, const float *c, int64_t n, float s);
    """
)


def compiler() -> str:
    return os.environ.get("CC") or "gcc"


def build(out_dir: Path) -> Path:
    """The shared library, rebuilt when the source or flags change."""
    text = SOURCE.read_bytes()
    key = hashlib.sha256(text + " ".join(FLAGS).encode()).hexdigest()[:16]
    library = out_dir / f"hand_kernels-{key}.so"
    if library.is_file():
        return library
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        built = Path(tmp) / library.name
        cmd = [compiler(), *FLAGS, str(SOURCE), "-o", str(built), "-lm"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        shutil.move(str(built), library)
    return library


def load(out_dir: Path):
    """The loaded library (cffi ABI mode)."""
    return _FFI.dlopen(str(build(out_dir)))


def ptr(array: np.ndarray, ctype: str = "float *"):
    """A C pointer to a contiguous array's data (the array must outlive its use)."""
    return _FFI.cast(ctype, array.ctypes.data)
