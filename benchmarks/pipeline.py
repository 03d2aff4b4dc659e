"""Pipeline-parallel BERT-base on Ray: throughput of 2 stages against 1.

Builds BERT-base (`examples/bert.py`: `bert(12, 768, 12)`, hidden states in, 12 encoder
blocks), cuts it with `mdsl.passes.pipeline_stages` and runs micro-batches through
`mdsl.runtime.pipeline.RayPipeline` on a local Ray cluster, against the same graph
compiled in one process. Each stage compiles with the C backend.

    python benchmarks/pipeline.py                       # seq 128, micro-batch 1, 8 of them
    python benchmarks/pipeline.py --seq 64 --micro-batches 16

Configurations (the threads of all stages together never exceed the cores):

    single     one process, mdsl.compile(g, "c", threads=1 and T)   no Ray
    1 stage    one Ray actor running the whole graph, threads=T
    2 stages   two Ray actors, one per half, threads=T/2 each

The configurations are timed in alternating rounds (the median of `--repeats`), so that a
change of load on a shared machine hits each of them alike.

Reported: sequences per second over the timed micro-batches (after warmup), and the
pipeline's balance and bytes sent per micro-batch. On a machine with C cores, 2 stages
at C/2 threads each compete with 1 stage at C threads: pipelining only wins where one
stage cannot use every core itself (small GEMMs, Python-bound ops) or where the stages
run on different machines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# GNU OpenMP threads spin after each parallel region; on 2 busy cores they starve OpenBLAS's
# own threads and every other process (a 2-thread BERT-base run took 8 s instead of 0.24 s
# here). Passive waiting lets them share the cores. Set before the generated libraries
# load libgomp; Ray actors get it through the runtime environment below.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np

import mdsl
from examples.bert import bert
from mdsl.passes.pipeline import pipeline_stages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch")
    parser.add_argument("--micro-batches", type=int, default=8, help="timed micro-batches")
    parser.add_argument("--warmup", type=int, default=2, help="untimed micro-batches first")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (median)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)

    import ray

    g = bert(12, 768, 12, seq=args.seq, batch=args.micro_batch)  # static: one build
    rng = np.random.default_rng(0)
    shape = (args.micro_batch, args.seq, 768)
    batches = [
        {"x": rng.standard_normal(shape, dtype=np.float32)} for _ in range(args.micro_batches)
    ]
    warm = batches[: args.warmup]
    print(
        f"BERT-base, {args.micro_batches} micro-batches of {args.micro_batch} x {args.seq} "
        f"tokens, {os.cpu_count()} cores, ray {ray.__version__}, "
        f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, load average {os.getloadavg()[0]:.1f}"
    )

    runners: dict[str, object] = {}
    for threads in sorted({1, args.threads}):
        single = mdsl.compile(g, backend="c", threads=threads)
        runners[f"single process x {_threads(threads)}"] = lambda bs, s=single: [s(b) for b in bs]
    reference = [single(b)["y"] for b in batches[:2]]

    # room for every actor at once (Ray's CPUs are logical: idle actors use none), so the
    # configurations can be timed in alternation, each round under the same load
    ray.init(
        num_cpus=3 * max(2, args.threads),
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"]}},
    )
    pipes = []
    try:
        from mdsl.runtime.pipeline import RayPipeline

        for n_stages in (1, 2):
            stages = pipeline_stages(g, n_stages)
            threads = max(1, args.threads // n_stages)
            start = time.perf_counter()
            pipe = RayPipeline(
                stages,
                backend="c",
                threads=threads,
                num_cpus=threads,  # Ray sets each actor's OMP_NUM_THREADS from this
                timeout=900,
                start_timeout=900,
            )
            pipes.append(pipe)
            ready = time.perf_counter() - start
            for out, want in zip(pipe.run(batches[:2]), reference):
                np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-4)
            label = f"Ray, {n_stages} stage{'s' if n_stages > 1 else ''} x {_threads(threads)}"
            runners[label] = pipe.run
            print(
                f"  {label}: started and compiled in {ready:.1f} s; imbalance "
                f"{stages.imbalance:.3f}; {_bytes_sent(stages) / 1e6:.2f} MB sent per micro-batch"
            )
        seconds = _time_interleaved(runners, batches, warm, args.repeats)
    finally:
        for pipe in pipes:
            pipe.close()
        ray.shutdown()

    print(f"\n{'configuration':<26} {'seq/s':>8} {'ms/micro-batch':>15}")
    sequences = args.micro_batches * args.micro_batch
    for label, t in seconds.items():
        print(f"{label:<26} {sequences / t:8.2f} {1000 * t / args.micro_batches:15.1f}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n > 1 else ''}"


def _time_interleaved(runners: dict, batches, warm, repeats: int) -> dict[str, float]:
    """Median seconds per configuration over `repeats` rounds, each round timing every
    configuration once (after one warmup each)."""
    for run in runners.values():
        run(warm)
    times: dict[str, list[float]] = {label: [] for label in runners}
    for _ in range(repeats):
        for label, run in runners.items():
            start = time.perf_counter()
            run(batches)
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(ts) for label, ts in times.items()}


def _bytes_sent(stages) -> int:
    return sum(stage.graph.outputs[key].type.nbytes for stage in stages for key in stage.sends)


if __name__ == "__main__":
    raise SystemExit(main())
