"""Specialized vs symbolic builds on W5 (one BERT-base encoder layer, seq 128).

The graph is `examples.bert.bert(1, 768, 12)`: batch "B" and sequence "S" symbolic.
Three executables of the "c" backend run it for batch 1 and 8:

- symbolic: `mdsl.compile(g)`, one build for every shape; kernels read B and S at run
  time, memory is planned per shape signature (cached);
- specialized: `mdsl.compile(g, specialize={"B": [1, 8], "S": [128]})`, a static
  variant per listed size, built ahead of time;
- per-signature: `mdsl.compile(g, specialize=True)`, a static variant built on first
  use of each shape (the behaviour before symbolic builds).

Prints build time (the first call, or `compile` for ahead-of-time variants; with a cold
build cache, `--cold`) and the median time of one call (`harness.measure`, the best of
`--rounds` interleaved rounds) for each, with the ratio to the specialized build;
`--json PATH` also writes the numbers.

Run: python benchmarks/specialize.py [--batches 1 8] [--threads N] [--rounds 3] [--cold]
                                     [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mdsl
from benchmarks.harness import measure
from examples.bert import bert

SEQ, HIDDEN, HEADS = 128, 768, 12


def feeds_for(batch: int) -> dict:
    rng = np.random.default_rng(batch)
    return {"x": rng.standard_normal((batch, SEQ, HIDDEN)).astype(np.float32)}


def build(kind: str, g: mdsl.Graph, batches: list[int], threads: int | None):
    """(executable, seconds spent compiling ahead of the first call)."""
    start = time.perf_counter()
    if kind == "specialized":
        exe = mdsl.compile(g, backend="c", threads=threads, specialize={"B": batches, "S": [SEQ]})
    elif kind == "per-signature":
        exe = mdsl.compile(g, backend="c", threads=threads, specialize=True)
    else:
        exe = mdsl.compile(g, backend="c", threads=threads)
    return exe, time.perf_counter() - start


KINDS = ("symbolic", "specialized", "per-signature")


def run(batches: list[int], threads: int | None, rounds: int) -> list[dict]:
    """Build the three executables, then time them interleaved: `rounds` rounds of each
    (build, batch), keeping each one's best median (other load on the machine then
    shows as noise on one round, not as a difference between builds)."""
    g = bert(1, HIDDEN, HEADS)
    rows: dict[tuple, dict] = {}
    outputs, executables = {}, {}
    for kind in KINDS:
        exe, ahead = build(kind, g, batches, threads)
        executables[kind] = exe
        for batch in batches:
            start = time.perf_counter()
            outputs[kind, batch] = exe(feeds_for(batch))["y"]
            rows[kind, batch] = {
                "build": kind,
                "batch": batch,
                "ahead_s": ahead,
                "first_call_s": time.perf_counter() - start,
                "symbolic_plan": exe.plan.is_symbolic,
                "arena_bytes": exe.memory.arena_bytes,
                "median_ms": float("inf"),
                "min_ms": float("inf"),
            }
            ahead = 0.0  # compile time is counted once
    for batch in batches:
        diff = np.max(np.abs(outputs["symbolic", batch] - outputs["specialized", batch]))
        assert diff < 1e-3, f"batch {batch}: builds disagree by {diff}"
    for _ in range(rounds):
        for batch in batches:
            feeds = feeds_for(batch)
            for kind, exe in executables.items():
                timing = measure(lambda exe=exe, feeds=feeds: exe(feeds), budget_s=1.0)
                row = rows[kind, batch]
                row["median_ms"] = min(row["median_ms"], timing.median_s * 1e3)
                row["min_ms"] = min(row["min_ms"], timing.min_s * 1e3)
    return [rows[kind, batch] for kind in KINDS for batch in batches]


def table(rows: list[dict]) -> str:
    lines = [
        f"{'build':<14} {'batch':>5} {'compile s':>10} {'1st call s':>10} {'median ms':>10} "
        f"{'min ms':>8} {'arena MB':>9} {'vs specialized':>15}",
    ]
    base = {r["batch"]: r["median_ms"] for r in rows if r["build"] == "specialized"}
    for r in rows:
        lines.append(
            f"{r['build']:<14} {r['batch']:>5} {r['ahead_s']:>10.2f} {r['first_call_s']:>10.2f} "
            f"{r['median_ms']:>10.2f} {r['min_ms']:>8.2f} {r['arena_bytes'] / 2**20:>9.1f} "
            f"{r['median_ms'] / base[r['batch']]:>14.2f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="a fresh, empty build cache")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.cold:
        os.environ["MDSL_CACHE_DIR"] = tempfile.mkdtemp(prefix="mdsl-bench-cache-")
    rows = run(args.batches, args.threads, args.rounds)
    print(f"W5: BERT-base encoder layer, seq {SEQ}, backend c, threads {args.threads or 'all'}")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
