"""mdsl benchmarks (`make bench`): mdsl-c and mdsl-numba against numpy, PyTorch eager,
ONNX Runtime and hand-written fused C loops, plus a STREAM triad; writes RESULTS.md.

Every workload runs in its own process, all contenders side by side at 1 and 2 threads,
taking turns in rounds of blocks of calls (`harness.side_by_side`); each figure is the
median of a contender's blocks after warmup. The parent process probes
which OpenBLAS kernel runs with the environment as given and without
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE; when every OpenBLAS it loads is a current build, the
benchmark processes run without those two variables (the parent's environment is left
as it is).

    python benchmarks/run.py                   # everything, writes benchmarks/RESULTS.md
    python benchmarks/run.py --only W1-4M,W7   # a subset (RESULTS.md is still written)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS.md"
BUILD = ROOT / "build" / "bench"
WORKER_TIMEOUT_S = 300
MIN_OPENBLAS = (0, 3, 27)  # first releases that know Sapphire Rapids / SkylakeX well

WORKLOAD_KEYS = ["W1-4M", "W1-64K", "W2", "W3", "W4", "W5-b1", "W5-b8", "W6-b1", "W6-b8", "W7"]
EXTRA_KEYS = ["STREAM", "memory", "compile"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", help="comma-separated keys: " + ",".join(WORKLOAD_KEYS + EXTRA_KEYS)
    )
    parser.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the Markdown report")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=120,
        help="seconds in all the run may wait for other processes to leave the CPUs idle "
        "before a workload starts (default 120; 0 never waits)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    if args.worker:
        import worker

        result = worker.run(args.worker, threads, BUILD)
        args.json.write_text(json.dumps(result, indent=1))
        sys.stdout.flush()
        os._exit(0)  # skips interpreter teardown, where threading runtimes have crashed
    return orchestrate(args, threads)


def orchestrate(args, threads: list[int]) -> int:
    import harness
    import report

    from mdsl.log import progress

    started = time.perf_counter()
    facts = harness.machine_facts()
    facts["revision"] = harness.git_revision(ROOT)
    print(f"mdsl benchmarks on {facts['cpu']} ({facts['cores']} cores, {facts['vector_isa']})")
    probes = probe_blas_settings()
    env, env_note = choose_env(probes)
    print(f"benchmark processes: {env_note}", flush=True)
    keys = args.only.split(",") if args.only else WORKLOAD_KEYS + EXTRA_KEYS
    budget = [args.wait_quiet]
    results = [run_worker(key, threads, env, budget) for key in progress(keys, "benchmarks")]
    elapsed = time.perf_counter() - started
    text = report.render(facts, probes, env_note, results, threads, elapsed)
    report.write_results(args.out, text)
    print(f"\nwrote {args.out} ({elapsed:.0f} s)")
    print(report.target_summary(results, threads))
    return 0


# -- BLAS settings --------------------------------------------------------------------------------------
def probe_blas_settings() -> dict[str, dict]:
    """Which OpenBLAS kernel runs, and the SGEMM speed, with the environment as given,
    cleaned, and (when not already so) forced to the Haswell core type."""
    import harness

    settings = {"as given": dict(os.environ), "cleaned": harness.clean_blas_env(dict(os.environ))}
    if os.environ.get("OPENBLAS_CORETYPE") is None:
        settings["OPENBLAS_CORETYPE=Haswell"] = {
            **settings["cleaned"],
            "OPENBLAS_CORETYPE": "Haswell",
        }
    probes = {}
    for label, env in settings.items():
        probes[label] = run_probe(env)
        libs = ", ".join(
            f"{lib['library']} {lib['version']} {lib['architecture']}"
            for lib in probes[label].get("openblas", [])
        )
        gemm = probes[label].get("sgemm_gflops")
        print(f"BLAS ({label}): {libs}; mdsl's SGEMM 128x3072x768 1 thread: {gemm} GFLOP/s")
    return probes


def run_probe(env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        cmd = [sys.executable, str(HERE / "run.py"), "--worker", "blas-probe", "--json", str(out)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0 or not out.is_file():
            return {"error": (proc.stderr or proc.stdout)[-2000:]}
        return json.loads(out.read_text())


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def choose_env(probes: dict[str, dict]) -> tuple[dict[str, str], str]:
    """The cleaned environment when every OpenBLAS loaded is current and computed a
    correct SGEMM under it; otherwise the environment as given."""
    import harness

    cleaned = probes.get("cleaned", {})
    libs = cleaned.get("openblas", [])
    current = bool(libs) and all(_version(lib["version"]) >= MIN_OPENBLAS for lib in libs)
    if current and cleaned.get("sgemm_ok"):
        unset = [k for k in harness.BLAS_ENV if k in os.environ]
        what = f"unset {', '.join(unset)}" if unset else "neither variable was set"
        return harness.clean_blas_env(dict(os.environ)), f"cleaned BLAS environment ({what})"
    return dict(os.environ), "environment as given (an OpenBLAS build is too old to clean it)"


# -- workers ---------------------------------------------------------------------------------------------
def run_worker(key: str, threads: list[int], env: dict[str, str], wait_budget: list[float]) -> dict:
    """Runs one worker process; first waits, within what is left of `wait_budget[0]`, for
    the machine to be quiet, and records how busy it was."""
    import harness

    busy, waited = harness.wait_for_quiet(wait_budget[0])
    wait_budget[0] = max(0.0, wait_budget[0] - waited)
    note = f" (other processes kept {busy:.0%} of the CPUs busy)" if busy > 0.1 else ""
    print(f"\n== {key}{note}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            str(HERE / "run.py"),
            "--worker",
            key,
            "--threads",
            ",".join(map(str, threads)),
            "--json",
            str(out),
        ]
        start = time.perf_counter()
        machine0, ours0 = harness.cpu_snapshot(), harness.children_cpu_seconds()
        try:
            proc = subprocess.run(
                cmd, env=env, timeout=WORKER_TIMEOUT_S, stderr=subprocess.PIPE, text=True
            )
            code, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as e:
            code, stderr = "timeout", e.stderr or ""
        warnings = stderr_notes(
            stderr if isinstance(stderr, str) else stderr.decode(errors="replace")
        )
        took = time.perf_counter() - start
        others = _others_share(
            machine0, harness.cpu_snapshot(), harness.children_cpu_seconds() - ours0
        )
        if not out.is_file():
            print(f"   {key} failed ({code}) after {took:.0f} s", flush=True)
            tail = " | ".join(warnings[-3:])
            return {"key": key, "error": f"worker exited with {code}: {tail}", "busy_before": busy}
        result = json.loads(out.read_text())
        if code != 0:
            warnings.append(f"the worker exited with {code} after writing its results")
        result["stderr_notes"] = warnings
        result["wall_s"] = took
        result["busy_before"] = busy
        result["busy_during"] = others
        if others > 0.1:
            print(f"   other processes used {others:.0%} of the CPUs while {key} ran", flush=True)
        result["busy_after"] = harness.cpu_busy_fraction()
        return result


def _others_share(before, after, our_cpu_s: float) -> float:
    """The share of all CPU time that processes other than the worker used meanwhile."""
    busy = after[0] - before[0]
    total = after[1] - before[1]
    return max(0.0, busy - our_cpu_s) / total if total > 0 else 0.0


def stderr_notes(stderr: str) -> list[str]:
    """A worker's stderr, summarized: repeated lines counted, Python warnings dropped."""
    counts: dict[str, int] = {}
    for line in stderr.splitlines():
        line = line.strip()
        if (
            line
            and not line.startswith(("warnings.warn", "tw = "))
            and "Warning: " not in line[:40]
        ):
            counts[line] = counts.get(line, 0) + 1
    notes = [f"{line} (x{n})" if n > 1 else line for line, n in counts.items()]
    for note in notes[:5]:
        print(f"   stderr: {note[:200]}", flush=True)
    return notes[:20]


if __name__ == "__main__":
    sys.exit(main())
