"""Running one hostile-input probe in its own process, with a timeout and a memory limit.

A probe is a function of `tests.robustness.hostile` named `probe_<name>`; it runs in a
fresh interpreter (`python -m tests.robustness.hostile <name> <folder>`), so a segfault,
SIGFPE, SIGBUS, hang or runaway allocation ends that process, not the test run, and
shows as the probe's failure. The child prints one JSON line: what happened.

Outcomes: "ok" (the probe finished: its own checks of the results passed), "refused"
(an `mdsl.MdslError`, with its class and message), "foreign" (any other exception: a
bug), and, seen from here, "crashed" (killed by a signal or a bad exit), "hung"
(timeout) and "no report".
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300  # seconds: generous, the suite runs on loaded 2-core machines
MEMORY = 3 << 30  # bytes of address space per probe


@dataclass
class Outcome:
    kind: str  # ok | refused | foreign | crashed | hung | no report
    error: str = ""  # the exception's class name
    message: str = ""

    def describe(self) -> str:
        return f"{self.kind} {self.error}: {self.message}".strip()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def probe_env(cache: Path, config: Path) -> dict:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(ROOT),
        MDSL_CACHE_DIR=str(cache),
        MDSL_CONFIG_DIR=str(config),
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        NUMBA_NUM_THREADS="1",
    )
    for name in ("CC", "MDSL_CFLAGS"):
        env.pop(name, None)
    return env


def run_probe(name: str, folder: Path, env: dict, timeout: float = TIMEOUT) -> Outcome:
    """Run probe `name` in a child process working in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tests.robustness.hostile", name, str(folder)]
    try:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return Outcome("hung", message=f"no result after {timeout} s")
    if done.returncode < 0:
        return Outcome("crashed", message=f"signal {-done.returncode}\n{done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return Outcome("no report", message=f"exit {done.returncode}\n{done.stderr[-2000:]}")
    report = json.loads(lines[-1])
    return Outcome(report["kind"], report.get("error", ""), report.get("message", ""))
