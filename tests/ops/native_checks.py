"""The check the C-form tests share: a graph compiles with no Python callback and equals
the interpreter on every feed."""

from __future__ import annotations

import numpy as np

import mdsl


def assert_native_and_equal(
    g: mdsl.Graph, feeds_list: list[dict], backend: str = "c", *, rtol: dict | None = None
) -> None:
    """Compile `g` for `backend`, assert its plan runs nothing in Python, and compare every
    output with the interpreter: exactly, or to `rtol[name]` for outputs named there (a
    float sum whose order the kernel chooses)."""
    exe = mdsl.compile(g, backend=backend)
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    for feeds in feeds_list:
        got, want = exe(**feeds), mdsl.interpret(g, feeds)
        for name in want:
            assert got[name].shape == want[name].shape, (name, feeds)
            if rtol and name in rtol:
                np.testing.assert_allclose(got[name], want[name], rtol=rtol[name], err_msg=name)
            else:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
