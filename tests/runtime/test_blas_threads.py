"""Loading the first generated library starts no OpenBLAS threads: OpenBLAS starts one
per processor as it loads, each spinning ~0.1 s of CPU, and mdsl never gives them work
(`mdsl.targets.c.backend._blas_without_threads`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from mdsl.targets.c import backend

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

CHILD = """
import os, numpy as np, mdsl
def threads():
    return len(os.listdir("/proc/self/task"))
before = threads()
w = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
with mdsl.Graph("blas_threads") as g:
    x = g.input("x", ("N", 64))
    g.output(mdsl.ops.relu(x @ g.const("w", w)), "y")
exe = mdsl.compile(g, backend="c", threads=1)
x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
np.testing.assert_allclose(exe(x=x)["y"], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
print(before, threads(), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_process_compiling_and_running_gains_no_blas_threads():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["MDSL_COMPILE_CACHE"] = "0"  # no writer thread
    run = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    before, after, variable = run.stdout.split()
    assert after == before
    assert variable == "None"  # the environment as it was


@pytest.mark.parametrize("previous", [None, "3"])
def test_the_variable_is_set_for_the_first_load_only_and_restored(monkeypatch, previous):
    if previous is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", previous)
    with backend._blas_without_threads(first=True):
        assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert os.environ.get("OPENBLAS_NUM_THREADS") == previous
    with backend._blas_without_threads(first=False):
        assert os.environ.get("OPENBLAS_NUM_THREADS") == previous
