"""Timing and machine facts for the benchmarks.

`measure(fn)` warms `fn` up, then takes repeated samples and returns the median time of
one call; fast functions are called several times per sample so a sample is never
shorter than about a millisecond (timer resolution and loop overhead stay negligible).
`side_by_side(contenders)` times several functions taking turns, so that a slow phase of
a shared machine lands on all of them alike.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
SAMPLE_SECONDS = 1e-3


@dataclass
class Timing:
    median_s: float
    min_s: float
    samples: int
    calls_per_sample: int

    def to_json(self) -> dict:
        return asdict(self)


def measure(
    fn, *, budget_s: float = 0.25, min_samples: int = 7, max_samples: int = 400, warmup: int = 3
) -> Timing:
    """Median seconds per call of `fn()` after warmup (`_warm`), within about `budget_s`
    (slow functions get fewer samples, at least 3)."""
    _warm(fn, warmup)
    once = max(_timed(fn), 1e-9)
    if once > 1.0:
        min_samples = 3
    elif once > 0.1:
        min_samples = min(min_samples, 5)
    number = max(1, int(SAMPLE_SECONDS / once))
    samples = min(max(int(budget_s / (once * number)), min_samples), max_samples)
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return Timing(statistics.median(times), min(times), samples, number)


@dataclass
class Contender:
    call: Callable[[], object]
    # before each of its blocks of calls: what another contender's calls may have changed
    # (OpenMP's thread count is the calling thread's, and every runtime sets it)
    prepare: Callable[[], None] = lambda: None


BLOCK_S = 0.01  # a contender's block of calls in one round, at least one call
# Untimed calls before a block after the settling sleep (at least one): on a 2-vCPU
# virtual machine the host lends the idle processor out during the sleep, gives it back
# late (7 ms) and takes it once more right after (4 ms); one untimed call left the second
# wake-up in the block, and a block of 10 ms of 40 us calls then read 1.5-2x slow
WAKE_S = 0.01


def side_by_side(
    contenders: dict[str, Contender], *, budget_s: float = 0.25, settle_s: float = 0.0
) -> dict[str, Timing]:
    """Each contender's median seconds per call, the contenders taking turns: in every
    round each runs a block of about BLOCK_S of calls, the round's order rotating. Before
    a block: `settle_s` of sleep (at 2+ threads the last contender's pool still spins and
    takes a core: ORT's worker spins about 50 ms of CPU time after a run) and then
    WAKE_S of untimed calls, at least one (waking the contender's own pool). The rounds
    take about `budget_s` per contender, at least 3-7 of them (fewer for slow calls).
    Each contender's first calls, which size its blocks, come after `settle_s` of sleep
    too: an mdsl-c executable's first calls choose its team size, and at 2 threads
    without the sleep they met ORT's, torch's and OpenBLAS's pools still spinning, and
    chose one thread."""
    once = {}
    for name, c in contenders.items():
        time.sleep(settle_s)
        c.prepare()
        _warm(c.call)
        once[name] = max(_timed(c.call), 1e-9)
    number = {name: max(1, int(BLOCK_S / t)) for name, t in once.items()}
    wake = {name: (max(1, int(WAKE_S / t)) if settle_s else 0) for name, t in once.items()}
    per_round = sum((number[n] + wake[n]) * once[n] + settle_s for n in contenders)
    slowest = max(once.values())
    least = 3 if slowest > 1.0 else 5 if slowest > 0.1 else 7
    rounds = min(max(int(budget_s * len(contenders) / per_round), least), 400)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            c = contenders[name]
            time.sleep(settle_s)
            c.prepare()
            for _ in range(wake[name]):
                c.call()
            start = time.perf_counter()
            for _ in range(number[name]):
                c.call()
            samples[name].append((time.perf_counter() - start) / number[name])
    return {
        name: Timing(statistics.median(ts), min(ts), len(ts), number[name])
        for name, ts in samples.items()
    }


def _warm(fn, calls: int = 3) -> None:
    """A few calls first, one for a function slower than 0.2 s: an mdsl-c executable's
    first four calls at 2 threads try each team size in turn (with 5 samples of a 0.15 s
    call, two of them had been its one-thread tries)."""
    once = _timed(fn)
    for _ in range(calls - 1 if once < 0.2 else 0):
        fn()


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "unknown"


def machine_facts() -> dict:
    """CPU model, core count, vector extensions, library versions."""
    import numpy
    import onnxruntime
    import torch

    flags = cpu_flags()
    vector = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "vector_isa": " ".join(vector),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "gcc": compiler_version(os.environ.get("CC") or "gcc"),
        "blas_env": {k: os.environ.get(k) for k in BLAS_ENV},
    }


def git_revision(root) -> str:
    """The commit checked out in `root`, with "+ local changes" when the tree is dirty."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "mdsl", "csrc"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{head} + local changes" if dirty else (head or "unknown")


def cpu_snapshot() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / tick, sum(values) / tick


def cpu_busy_fraction(seconds: float = 0.5) -> float:
    """The fraction of all CPUs busy (with anything) over the next `seconds`."""
    try:
        busy0, total0 = cpu_snapshot()
        time.sleep(seconds)
        busy1, total1 = cpu_snapshot()
    except (OSError, ValueError, IndexError):
        return 0.0
    return (busy1 - busy0) / max(total1 - total0, 1e-9)


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for_quiet(max_wait_s: float, busy_limit: float = 0.1) -> tuple[float, float]:
    """Wait (at most `max_wait_s`) until other processes leave the CPUs nearly idle;
    returns (the busy fraction last seen, seconds waited)."""
    start = time.perf_counter()
    busy = cpu_busy_fraction()
    while busy > busy_limit and time.perf_counter() - start < max_wait_s:
        busy = cpu_busy_fraction(1.0)
    return busy, time.perf_counter() - start


def clean_blas_env(env: dict[str, str]) -> dict[str, str]:
    """`env` without the variables that force an old OpenBLAS core type."""
    return {k: v for k, v in env.items() if k not in BLAS_ENV}
