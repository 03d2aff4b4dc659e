"""Convolution, GEMM and threading cases: mdsl-c against ONNX Runtime, side by side.

Each case is one ONNX model (written with `onnx.helper`) that ORT and mdsl both run from
the same bytes. At 1 thread calls alternate between the two contenders in rounds, so
both see the same machine; at more threads they take turns in blocks of calls (each
runtime's idle threads spin after a call and would slow the other's next ones, see
`_blocks`). The figure is the median ratio over rounds (blocks) with its spread (min-max
of the per-round ratios). `--load` keeps one core busy with a background process for the whole
run (`--load N`: N processes spinning): the loaded-machine rule of the threading work (2
threads must never be slower than 1 thread) is read from these rows, and each row gives
the load average (`/proc/loadavg`, one minute) at its end.

    python benchmarks/conv_gemm.py                      # every case, 1 and 2 threads
    python benchmarks/conv_gemm.py --only dw,mlp --load
    python benchmarks/conv_gemm.py --only softmax,mlp --load --thread-rule  # 2T vs 1T
    python benchmarks/conv_gemm.py --only mbv2 --load 7 --thread-rule      # a busier machine
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import onnx_graphs  # noqa: E402
from onnx_graphs import OnnxBuilder  # noqa: E402

import mdsl  # noqa: E402
from mdsl.codegen import onednn as mdsl_onednn  # noqa: E402
from mdsl.frontends import onnx as mdsl_onnx  # noqa: E402

RNG = np.random.default_rng(16)


def _w(*shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return (RNG.standard_normal(shape) * (scale or 1.0 / np.sqrt(fan_in))).astype(np.float32)


def _finish(g: OnnxBuilder, y: str, out_shape) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        g.nodes,
        "case",
        g.inputs,
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, list(out_shape))],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", onnx_graphs.OPSET)])
    model.ir_version = onnx_graphs.IR_VERSION
    return model


def mobilenet_block(batch=1, c=24, expand=6, size=56):
    """MobileNetV2 inverted residual: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1
    project, residual add."""
    g = OnnxBuilder()
    x = g.input("x", (batch, c, size, size))
    e = c * expand
    lo, hi = g.const(0.0), g.const(6.0)
    h = g.op("Clip", g.op("Conv", x, g.const(_w(e, c, 1, 1)), g.const(_w(e))), lo, hi)
    h = g.op(
        "Clip",
        g.op("Conv", h, g.const(_w(e, 1, 3, 3)), g.const(_w(e)), pads=(1, 1, 1, 1), group=e),
        lo,
        hi,
    )
    h = g.op("Conv", h, g.const(_w(c, e, 1, 1)), g.const(_w(c)))
    return _finish(g, g.op("Add", h, x), (batch, c, size, size)), {"x": _feed(batch, c, size, size)}


def depthwise(batch=1, c=144, size=56, k=3, stride=1):
    g = OnnxBuilder()
    x = g.input("x", (batch, c, size, size))
    p = k // 2
    h = g.op(
        "Conv",
        x,
        g.const(_w(c, 1, k, k)),
        g.const(_w(c)),
        pads=(p, p, p, p),
        group=c,
        strides=(stride, stride),
    )
    o = (size + 2 * p - k) // stride + 1
    return _finish(g, g.op("Relu", h), (batch, c, o, o)), {"x": _feed(batch, c, size, size)}


def resnet_block(batch=1, c=64, size=56):
    g = OnnxBuilder()
    x = g.input("x", (batch, c, size, size))
    h = g.op("Relu", g.op("Conv", x, g.const(_w(c, c, 3, 3)), g.const(_w(c)), pads=(1,) * 4))
    h = g.op("Conv", h, g.const(_w(c, c, 3, 3)), g.const(_w(c)), pads=(1,) * 4)
    y = g.op("Relu", g.op("Add", h, x))
    return _finish(g, y, (batch, c, size, size)), {"x": _feed(batch, c, size, size)}


def conv(batch=1, c=64, size=56, cout=64, k=3, stride=1, group=1, residual=False):
    """One Conv + bias + ReLU (+ a residual Add before the ReLU when shapes allow)."""
    g = OnnxBuilder()
    x = g.input("x", (batch, c, size, size))
    p = k // 2
    h = g.op(
        "Conv",
        x,
        g.const(_w(cout, c // group, k, k)),
        g.const(_w(cout)),
        pads=(p,) * 4,
        strides=(stride, stride),
        group=group,
    )
    if residual:
        h = g.op("Add", h, x)
    o = (size + 2 * p - k) // stride + 1
    return _finish(g, g.op("Relu", h), (batch, cout, o, o)), {"x": _feed(batch, c, size, size)}


def conv1d(batch=1, c=256, length=1024, k=3):
    g = OnnxBuilder()
    x = g.input("x", (batch, c, length))
    h = g.op("Conv", x, g.const(_w(c, c, k)), g.const(_w(c)), pads=(k // 2, k // 2))
    return _finish(g, g.op("Relu", h), (batch, c, length)), {"x": _feed(batch, c, length)}


def mlp(rows=128, d=768, f=3072):
    g = OnnxBuilder()
    x = g.input("x", (rows, d))
    h = g.gelu(g.linear(x, _w(d, f), _w(f)))
    return _finish(g, g.linear(h, _w(f, d), _w(d)), (rows, d)), {"x": _feed(rows, d)}


def batched_m1(batch=17, d=768, n=2304):
    """`[17,1,768] @ [768,2304]`: nn.MultiheadAttention's in-projection of a sequence."""
    g = OnnxBuilder()
    x = g.input("x", (batch, 1, d))
    return _finish(g, g.linear(x, _w(d, n), _w(n)), (batch, 1, n)), {"x": _feed(batch, 1, d)}


def attention(batch=1, heads=12, seq=128, dh=64):
    """softmax(Q Kᵀ / 8) V with K given as [B, H, S, D] (a transposed operand)."""
    g = OnnxBuilder()
    shape = (batch, heads, seq, dh)
    q, k, v = (g.input(n, shape) for n in "qkv")
    s = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=(0, 1, 3, 2))), g.const(0.125))
    y = g.op("MatMul", g.op("Softmax", s, axis=-1), v)
    return _finish(g, y, shape), {n: _feed(*shape) for n in "qkv"}


def softmax(shape=(64, 12, 128, 128)):
    """W3: softmax over the last axis; the 48 MiB output is larger than glibc's mmap
    threshold, so a fresh output array faults its pages in on every call."""
    model = onnx_graphs.softmax(shape)
    return model, {"x": _feed(*shape)}


def pointwise(n=4 << 20):
    """W1: gelu(x * 1.1 + 0.1) * sigmoid(x) + x, exact erf GELU."""
    return onnx_graphs.pointwise_chain(n, 1.1, 0.1), {"x": 2.0 * _feed(n)}


def layer_norm(rows=4096, d=768):
    """W2: layer norm over the last axis."""
    model = onnx_graphs.layer_norm((rows, d), _w(d, scale=1.0) + 1.0, _w(d, scale=1.0), 1e-5)
    return model, {"x": _feed(rows, d)}


def exported_block(name: str):
    """A block of `torch_models` as exported by `exported.py` (torch needed)."""
    import exported
    import onnx
    import torch
    import torch_models

    torch.set_grad_enabled(False)
    case = torch_models.BLOCKS[name]()
    model = onnx.load_from_string(exported.export_onnx(case))
    return model, {n: t.numpy() for n, t in zip(case.names, case.inputs)}


def _feed(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "dw": depthwise,
    "dw-s2": lambda: depthwise(c=96, size=112, stride=2),
    "mbv2": mobilenet_block,
    "resnet-b1": resnet_block,
    "resnet-b8": lambda: resnet_block(batch=8),
    "conv1d": conv1d,
    # single convolutions of ResNet-50 / MobileNetV2 / ShuffleNet shapes (bias + ReLU)
    "c3-64": lambda: conv(c=64, cout=64, residual=True),
    "c3-128": lambda: conv(c=128, cout=128, size=28),
    "c3-256": lambda: conv(c=256, cout=256, size=14),
    "c3-512": lambda: conv(c=512, cout=512, size=7),
    "c1-64-256": lambda: conv(c=64, cout=256, k=1),
    "c1-256-64": lambda: conv(c=256, cout=64, k=1),
    "c1-1024-256": lambda: conv(c=1024, cout=256, size=14, k=1),
    "c3s2-128": lambda: conv(c=128, cout=128, size=56, stride=2),
    "c1s2-512-1024": lambda: conv(c=512, cout=1024, size=28, k=1, stride=2),
    "stem7": lambda: conv(c=3, cout=64, size=224, k=7, stride=2),
    "grp1-240": lambda: conv(c=240, cout=240, size=28, k=1, group=3),
    "grp3-g8": lambda: conv(c=256, cout=256, size=28, k=3, group=8),
    "mlp": mlp,
    "bmm-m1": batched_m1,
    "attn": attention,
    "softmax": softmax,
    "layernorm": layer_norm,
    "pointwise": pointwise,
    "bert-b1": lambda: exported_block("bert-layer-b1"),
    "bert-b8": lambda: exported_block("bert-layer-b8"),
    "gpt2-b1": lambda: exported_block("gpt2-block-b1"),
}


def _interleaved(fns: dict, rounds: int, budget_s: float) -> dict[str, list[float]]:
    """Per-round time of one call of every fn, fns alternating inside each round. Each
    contender's timed calls follow one untimed call of its own: the idle threads of the
    contender before it spin for a while after its call (ORT's pool, libgomp's team) and
    would take a core from the first call after it, which a user running one runtime
    never sees."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    once = max(min(_time(fn, 1) for _ in range(3)) for fn in fns.values())
    number = max(1, int(2e-3 / once))
    end = time.perf_counter() + budget_s  # a loaded machine makes any count of rounds slow
    times = {k: [] for k in fns}
    for done in range(rounds):
        if done >= 5 and time.perf_counter() > end:
            break
        for key, fn in fns.items():
            fn()
            times[key].append(_time(fn, number))
    return times


def _blocks(fns: dict, budget_s: float, blocks: int = 6) -> dict[str, list[float]]:
    """Per-block median call time of every fn, the fns taking turns in blocks of calls
    (the first two calls of a block untimed), the order rotating from one round of blocks
    to the next. For more than one thread: ORT's pool keeps spinning for a while after a
    run (about 50 ms of its worker's CPU time at 2 threads) and took a core from every
    mdsl call that followed, a state a user running one runtime never sees; in blocks,
    each after `COOLDOWN_S` of sleep so the last block's pool has gone to sleep, each
    runtime runs as it would alone, and alternating blocks still share the machine's load.
    The rotation keeps one contender from always following the same other."""
    for fn in fns.values():
        fn()
    once = max(min(_time(fn, 1) for _ in range(3)) for fn in fns.values())
    calls = max(5, int(budget_s / (blocks * len(fns) * once)))
    times = {k: [] for k in fns}
    keys = list(fns)
    for b in range(blocks):
        for key in keys[b % len(keys) :] + keys[: b % len(keys)]:
            fn = fns[key]
            time.sleep(COOLDOWN_S)
            fn(), fn()
            times[key].append(statistics.median(_time(fn, 1) for _ in range(calls)))
    return times


COOLDOWN_S = 0.2


CLOCK = [time.perf_counter]


def _time(fn, number: int) -> float:
    start = CLOCK[0]()
    for _ in range(number):
        fn()
    return (CLOCK[0]() - start) / number


ONEDNN_LAYOUTS = {"dnnl": "blocked", "dnnl-per-conv": "per-conv", "dnnl-nchw": "nchw"}


def _onednn_contenders(model, feeds, theirs, threads: int) -> dict:
    """oneDNN chains of the case (`benchmarks/onednn_chain.py`), one per layout, each
    checked against ORT's result first."""
    import onednn_chain

    os.environ["OMP_NUM_THREADS"] = str(threads)  # oneDNN's team: the same libgomp
    out = {}
    for key, layout in ONEDNN_LAYOUTS.items():
        chain = onednn_chain.OneDnnChain(model, feeds, layout)
        err = float(np.max(np.abs(chain(**feeds) - theirs)) / (np.max(np.abs(theirs)) + 1e-30))
        if err > 1e-4:
            raise AssertionError(f"oneDNN ({layout}) differs from ORT by {err:.1e}")
        out[key] = (lambda c=chain: c(**feeds), "/".join(sorted(set(chain.impls))))
        if layout == "blocked":
            out["dnnl-convs"] = (lambda c=chain: c.convolutions_only(**feeds), "")
    return out


def run_case(name: str, threads: list[int], budget_s: float, onednn: bool = False) -> list[dict]:
    model, feeds = CASES[name]()
    rows = []
    graph = mdsl_onnx.load(model)
    for t in threads:
        exe = mdsl.compile(graph, "c", threads=t)
        sess = onnx_graphs.session(model, t)
        ours = exe(**feeds)
        ours = ours if isinstance(ours, np.ndarray) else next(iter(ours.values()))
        theirs = sess.run(None, feeds)[0]
        err = float(np.max(np.abs(ours - theirs)) / (np.max(np.abs(theirs)) + 1e-30))
        fns = {"mdsl": lambda e=exe: e(**feeds), "ort": lambda s=sess: s.run(None, feeds)}
        impls = {}
        if onednn:
            with mdsl_onednn.disabled():  # plans are made by the first call
                hand = mdsl.compile(graph, "c", threads=t)
                hand(**feeds)
            fns["mdsl-hand"] = lambda e=hand: e(**feeds)
            for key, (fn, impl) in _onednn_contenders(model, feeds, theirs, t).items():
                fns[key], impls[key] = fn, impl
        times = _interleaved(fns, 200, budget_s) if t == 1 else _blocks(fns, budget_s)
        row = {"case": name, "threads": t, "rel_err": err, "impls": impls}
        for key, ts in times.items():
            ratios = [a / b for a, b in zip(ts, times["ort"])]
            row[key] = {
                "ms": 1e3 * statistics.median(ts),
                "ratio": statistics.median(ratios),
                "spread": (min(ratios), max(ratios)),
                "best_ratio": min(ts) / min(times["ort"]),
            }
        rows.append(row)
    return rows


def run_thread_rule(name: str, budget_s: float) -> dict:
    """mdsl at 1 and at 2 threads interleaved in each round for `budget_s`, then ORT at 1
    and 2 threads the same way (for 2 s at most: a reference only): the rule is that 2
    threads are never slower than 1. The two runtimes are timed apart because each one's
    idle threads spin for a while after a call (ORT's pool, libgomp's team), taking a core
    from the other's next call. The rule's mean is read from many calls: under load one
    call in hundreds can take 100 times the median, on either thread count, so the mean
    ratio is also given per fifth of the rounds (its spread)."""
    model, feeds = CASES[name]()
    graph = mdsl_onnx.load(model)
    ours, theirs = {}, {}
    for t in (1, 2):
        exe = mdsl.compile(graph, "c", threads=t)
        sess = onnx_graphs.session(model, t)
        ours[f"mdsl {t}T"] = lambda e=exe: e(**feeds)
        theirs[f"ORT {t}T"] = lambda s=sess: s.run(None, feeds)
    rounds = 1 << 30  # as many as the budget allows
    times = {**_interleaved(ours, rounds, budget_s), **_interleaved(theirs, rounds, 2.0)}
    two, one = times["mdsl 2T"], times["mdsl 1T"]
    ratios = sorted(a / b for a, b in zip(two, one))
    row = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    row.update(case=name, ratio=statistics.median(ratios), spread=(ratios[0], ratios[-1]))
    row["mean_ratio"] = statistics.mean(two) / statistics.mean(one)
    fifths = [slice(i * len(two) // 5, (i + 1) * len(two) // 5) for i in range(5)]
    means = [statistics.mean(two[f]) / statistics.mean(one[f]) for f in fifths]
    row["mean_spread"] = (min(means), max(means))
    row["rounds"] = len(two)
    return row


def background_load(processes: int = 1) -> list[subprocess.Popen]:
    """Processes spinning on the CPU (one: the 'another process keeps a core busy' load)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]


def load_average() -> float:
    """The machine's one-minute load average (nan where /proc/loadavg is missing)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated cases: " + ",".join(CASES))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument(
        "--load",
        type=int,
        nargs="?",
        const=1,
        default=0,
        metavar="N",
        help="keep one core busy meanwhile (N: that many processes spinning)",
    )
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per case and thread")
    parser.add_argument(
        "--onednn",
        action="store_true",
        help="add mdsl-c without oneDNN (mdsl-hand: its hand-written kernels) and oneDNN "
        "convolution chains (onednn-cpu-gomp) as contenders: "
        + ", ".join(f"{k} = {v} activations" for k, v in ONEDNN_LAYOUTS.items())
        + ", dnnl-convs = the blocked chain's convolutions without its reorders",
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the calling thread's CPU time, not wall time (1 thread only: both "
        "contenders then compute on the calling thread; on a machine busy with other work "
        "this counts what a call costs rather than how long it waited for a core)",
    )
    parser.add_argument(
        "--thread-rule",
        action="store_true",
        help="time mdsl at 1 and 2 threads side by side (with --load: the loaded-machine rule)",
    )
    args = parser.parse_args(argv)
    if args.cpu_time:
        CLOCK[0] = time.thread_time
        args.threads = "1"
    threads = [int(t) for t in args.threads.split(",")]
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(CASES)}")
    load = background_load(args.load)
    try:
        if args.thread_rule:
            return _print_thread_rule(names, args.budget)
        keys = ["mdsl", *(("mdsl-hand", *ONEDNN_LAYOUTS, "dnnl-convs") if args.onednn else ())]
        print(
            "| case | threads | ORT ms | "
            + " | ".join(f"{k} ms | {k}/ORT median (spread)" for k in keys)
            + " | mdsl rel err |"
            + (" oneDNN impl |" if args.onednn else "")
        )
        print("|---|---|---|" + "---|---|" * len(keys) + "---|" + ("---|" if args.onednn else ""))
        for name in names:
            for r in run_case(name, threads, args.budget, args.onednn):
                cells = []
                for k in keys:
                    c = r[k]
                    lo, hi = c["spread"]
                    cells.append(f"{c['ms']:.3f} | {c['ratio']:.2f} ({lo:.2f}-{hi:.2f})")
                impl = f" {r['impls'].get('dnnl', '')} |" if args.onednn else ""
                print(
                    f"| {r['case']} | {r['threads']} | {r['ort']['ms']:.3f} | "
                    + " | ".join(cells)
                    + f" | {r['rel_err']:.1e} |{impl}",
                    flush=True,
                )
    finally:
        for process in load:
            process.kill()
    return 0


def _print_thread_rule(names: list[str], budget_s: float) -> int:
    print(
        "| case | mdsl 1T ms | mdsl 2T ms | ORT 1T ms | ORT 2T ms | mdsl 2T / 1T median | spread "
        "| mean 2T / mean 1T (per fifth) | rounds | load average |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        r = run_thread_rule(name, budget_s)
        (lo, hi), (m_lo, m_hi) = r["spread"], r["mean_spread"]
        print(
            f"| {name} | {r['mdsl 1T']:.3f} | {r['mdsl 2T']:.3f} | {r['ORT 1T']:.3f} "
            f"| {r['ORT 2T']:.3f} | {r['ratio']:.2f} | {lo:.2f}-{hi:.2f} | {r['mean_ratio']:.2f} "
            f"({m_lo:.2f}-{m_hi:.2f}) | {r['rounds']} | {load_average():.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
