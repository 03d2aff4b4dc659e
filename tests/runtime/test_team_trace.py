"""MDSL_TEAM_TRACE=1: a compiled C library writes a line per call on stderr with its team
size, time and the team choice's state (csrc/templates/c/team.h.j2, mdsl_team_trace);
without it, nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

PROGRAM = """
import numpy as np
import mdsl
with mdsl.Graph("traced") as g:
    x = g.input("x", (4096,))
    g.output(x * 2.0 + 1.0, "y")
exe = mdsl.compile(g, backend="c", threads=2)
for _ in range(6):
    exe(x=np.ones(4096, np.float32))
"""
LINE = re.compile(
    r"mdsl team 0x[0-9a-f]+ call (\d+): team [01] took [\d.]+ us \(wake [\d.]+ us\)"
    r"( after a pause)?; choice [01], recent [\d.]+ us, other [\d.]+ us, credit -?[\d.]+ us, "
    r"probe call \d, next probe \d+"
)


def _stderr(trace: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MDSL_TEAM_TRACE"}
    if trace is not None:
        env["MDSL_TEAM_TRACE"] = trace
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.parametrize("trace", [None, "0"])
def test_no_trace_unless_asked(trace):
    assert "mdsl team" not in _stderr(trace)


def test_a_line_per_call_with_the_policys_state():
    lines = [line for line in _stderr("1").splitlines() if line.startswith("mdsl team")]
    calls = [int(LINE.fullmatch(line).group(1)) for line in lines]
    assert calls[-6:] == list(range(calls[-6], calls[-6] + 6))  # the six calls, in order
