"""ONNX's light models on mdsl-c with and without oneDNN's convolutions, and ONNX
Runtime, side by side in one process. At 1 thread calls are interleaved in rounds
(thread CPU time with `--cpu-time`, which on a shared machine counts what a call costs);
at more threads (`--threads 2`, wall time) the contenders take turns in blocks of calls
(`conv_gemm._blocks`: each runtime's idle threads spin after a call and would slow the
next contender's calls; `--blocks` of them per contender, the order rotating), the
figure per block being its median call.

    python benchmarks/onednn_light.py --only resnet50,shufflenet --rounds 7 --cpu-time
    python benchmarks/onednn_light.py --only resnet50 --threads 2 --budget 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mdsl
from mdsl.codegen import onednn
from mdsl.frontends import onnx_light_models as light
from mdsl.frontends.onnx_import import import_model, mdsl_name


def contenders(name: str, threads: int = 1) -> dict:
    import onnxruntime as ort

    model = light.logits_model(light.with_random_weights(light.load_light_model(name), 0))
    feeds = light.random_feeds(model, 0)
    ours = {mdsl_name(k): v for k, v in feeds.items()}
    g = mdsl.optimize(import_model(model, label=f"light_{name}"), level=2)
    with_dnnl = mdsl.compile(g, "c", threads=threads)
    with_dnnl.run(ours)
    with onednn.disabled():  # a static build's plan is made by its first call
        hand = mdsl.compile(g, "c", threads=threads)
        hand.run(ours)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.log_severity_level = 3  # the light models carry unused initializers
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    out = mdsl_name(model.graph.output[0].name)
    ref = sess.run(None, feeds)[0]
    for exe in (with_dnnl, hand):
        err = np.abs(exe.run(ours)[out] - ref).max() / np.abs(ref).max()
        assert err < 1e-4, f"{name}: differs from ORT by {err:.1e}"
    return {
        "mdsl": lambda: with_dnnl.run(ours),
        "mdsl-hand": lambda: hand.run(ours),
        "ort": lambda: sess.run(None, feeds),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="resnet50,inception_v2,shufflenet,squeezenet")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cpu-time", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--budget", type=float, default=20.0, help="seconds per model (threads > 1)"
    )
    parser.add_argument(
        "--blocks", type=int, default=12, help="blocks of calls per contender (threads > 1)"
    )
    args = parser.parse_args(argv)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    print(f"{args.threads} thread(s), {'thread CPU' if args.cpu_time else 'wall'} time")
    print("| model | ORT ms | mdsl-c / ORT (spread) | mdsl-c hand kernels / ORT (spread) |")
    print("|---|---|---|---|")
    for name in args.only.split(","):
        fns = contenders(name, args.threads)
        if args.threads > 1:
            from conv_gemm import _blocks

            times = _blocks(fns, args.budget, args.blocks)
        else:
            times = {k: [] for k in fns}
            for _ in range(args.rounds):
                for key, fn in fns.items():
                    t0 = clock()
                    fn()
                    times[key].append(clock() - t0)
        cells = []
        for key in ("mdsl", "mdsl-hand"):
            r = [a / b for a, b in zip(times[key], times["ort"])]
            cells.append(f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
        ort_ms = 1e3 * statistics.median(times["ort"])
        print(f"| {name} | {ort_ms:.1f} | {cells[0]} | {cells[1]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
