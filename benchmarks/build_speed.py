"""How long building a BERT-base-sized graph takes.

Builds BERT-base (12 layers of self-attention + FFN, hidden 768, 12 heads, FFN 3072,
30522-word vocabulary tied to the output head, ~110M parameters) from primitive ops only
(matmul, add, sub, mul, div, exp, sqrt, tanh, reductions, reshape, transpose, split,
concat, slicing), so that softmax, layer norm and GELU each become several nodes and each
attention head is its own small subgraph, as a graph imported from a framework may hold
them: about 2,000 nodes. Prints the node count, the parameter count and the median
build time over 5 builds. Parameter values are drawn lazily, so this measures building:
naming, shape inference, checks and recording nodes.

With `--first-result` it measures instead the time to the first result as a user's new
process sees it: import mdsl, build the graph, `mdsl.compile(backend="c")` (symbolic
batch) and one call at batch 1, each run in a fresh Python process, with a cold cache
(an empty `MDSL_CACHE_DIR`: the graph is optimized, planned, rendered and gcc runs) and
then warm (the same folder again: the compile cache, `mdsl.runtime.compile_cache`, serves
`mdsl.compile`). Wall and CPU seconds per phase (CPU includes the C compiler's and every
thread's); medians of `--repeats`. The executable is compiled as a user's is, with
mdsl's default `threads=None` (`--threads 0`: one thread or the whole team per call,
the first call on the whole team when a processor is free, `csrc/templates/c/team.h.j2`);
`--threads 1` keeps it on one thread.

Run: python benchmarks/build_speed.py [--layers 12] [--repeats 5] [--first-result]
     [--threads 0]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import mdsl
from mdsl import ops

HIDDEN, HEADS, FFN, VOCAB, MAX_POS, SEQ = 768, 12, 3072, 30522, 512, 128
HEAD = HIDDEN // HEADS


@mdsl.layer
def dense(x, n_out):
    w = mdsl.param("weight", (x.shape[-1], n_out))
    return ops.matmul(x, w) + mdsl.param("bias", (n_out,), init="zeros")


@mdsl.layer
def layer_norm(x, eps=1e-12):
    mean = ops.reduce_mean(x, axes=(-1,), keepdims=True)
    centered = x - mean
    var = ops.reduce_mean(centered * centered, axes=(-1,), keepdims=True)
    normed = centered / ops.sqrt(var + eps)
    return normed * mdsl.param("gamma", (HIDDEN,), init="ones") + mdsl.param(
        "beta", (HIDDEN,), init="zeros"
    )


@mdsl.layer
def softmax(x):
    shifted = x - ops.reduce_max(x, axes=(-1,), keepdims=True)
    e = ops.exp(shifted)
    return e / ops.reduce_sum(e, axes=(-1,), keepdims=True)


@mdsl.layer
def gelu(x):
    """The tanh approximation, as BERT's original code writes it."""
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))
    return 0.5 * x * (1.0 + ops.tanh(inner))


def split_heads(x):
    return x.reshape(-1, SEQ, HEADS, HEAD).transpose(0, 2, 1, 3)  # (B, heads, S, head)


@mdsl.layer
def head(q, k_t, v, mask_bias):
    return ops.matmul(softmax(ops.matmul(q, k_t) + mask_bias), v)


@mdsl.layer
def attention(x, mask_bias):
    """Multi-head attention as the Transformer paper writes it: project, split into heads,
    attend per head, concatenate, project."""
    q = split_heads(dense(x, HIDDEN)) * (1 / math.sqrt(HEAD))
    k_t = split_heads(dense(x, HIDDEN)).transpose(0, 1, 3, 2)  # (B, heads, head, S)
    v = split_heads(dense(x, HIDDEN))
    per_head = zip(*(ops.split(t, axis=1, num_outputs=HEADS) for t in (q, k_t, v)))
    heads = [head(qh, kh, vh, mask_bias) for qh, kh, vh in per_head]
    context = ops.concat(heads, axis=1).transpose(0, 2, 1, 3).reshape(-1, SEQ, HIDDEN)
    return dense(context, HIDDEN)


@mdsl.layer
def encoder_layer(x, mask_bias):
    x = layer_norm(x + attention(x, mask_bias))
    return layer_norm(x + dense(gelu(dense(x, FFN)), HIDDEN))


@mdsl.layer
def embeddings(inputs_embeds, token_types):
    positions = mdsl.param("position_embeddings", (MAX_POS, HIDDEN))[:SEQ]
    types = ops.matmul(token_types, mdsl.param("token_type_embeddings", (2, HIDDEN)))
    return layer_norm(inputs_embeds + positions + types)


def build_bert(layers: int = 12) -> mdsl.Graph:
    with mdsl.Graph("bert_base") as g:
        x = g.input("inputs_embeds", ("B", SEQ, HIDDEN))
        token_types = g.input("token_types", ("B", SEQ, 2))  # one-hot segment ids
        mask = g.input("attention_mask", ("B", 1, 1, SEQ))  # 1 keep, 0 pad
        mask_bias = (1.0 - mask) * -10000.0
        h = embeddings(x, token_types)
        for _ in range(layers):
            h = encoder_layer(h, mask_bias)
        with mdsl.scope("pooler"):
            pooled = ops.tanh(dense(h[:, 0], HIDDEN))
        with mdsl.scope("mlm_head"):
            t = layer_norm(gelu(dense(h, HIDDEN)))
            words = mdsl.param("word_embeddings", (VOCAB, HIDDEN))  # tied to the input table
            logits = ops.matmul(t, words.T) + mdsl.param("bias", (VOCAB,), init="zeros")
        g.output(logits, "logits")
        g.output(pooled, "pooled")
    return g


PHASES = ("import", "build", "compile", "first call")


def _clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its finished children)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), time.process_time() + children.ru_utime + children.ru_stime


def first_result_child(layers: int, start: tuple[float, float], threads: int = 1) -> dict:
    """One user's process: the phases' (wall, CPU) seconds; `start` was taken before
    this module (and so mdsl) was imported."""
    import numpy as np

    marks = [start, _clock()]
    g = build_bert(layers)
    marks.append(_clock())
    exe = mdsl.compile(g, backend="c", threads=threads or None)
    marks.append(_clock())
    rng = np.random.default_rng(0)
    exe.run(
        {
            "inputs_embeds": rng.standard_normal((1, SEQ, HIDDEN), dtype=np.float32),
            "token_types": np.eye(2, dtype=np.float32)[np.zeros((1, SEQ), int)],
            "attention_mask": np.ones((1, 1, 1, SEQ), np.float32),
        }
    )
    marks.append(_clock())
    phases = {name: (b[0] - a[0], b[1] - a[1]) for name, a, b in zip(PHASES, marks, marks[1:])}
    return {"phases": phases, "fallbacks": list(exe.plan.fallbacks)}


def first_result(layers: int, repeats: int, threads: int = 1) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    here = os.path.dirname(os.path.abspath(__file__))
    child = (
        "import resource, sys, time; ch = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "start = (time.perf_counter(), time.process_time() + ch.ru_utime + ch.ru_stime); "
        f"sys.path[:0] = [{here!r}, {os.path.dirname(here)!r}]; import json, build_speed; "
        f"print(json.dumps(build_speed.first_result_child({layers}, start, {threads})))"
    )
    cmd = [sys.executable, "-c", child]
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(repeats):  # cold and warm interleaved: both see the same machine load
        with tempfile.TemporaryDirectory() as cache:
            for state in ("cold", "warm"):
                out = subprocess.run(cmd, env={**env, "MDSL_CACHE_DIR": cache},
                                     capture_output=True, text=True, check=True)  # fmt: skip
                runs[state].append(json.loads(out.stdout.splitlines()[-1]))
    team = f"threads={threads}" if threads else "threads=None"
    print(f"BERT-base, {layers} layers, symbolic batch, {team}, first call at batch 1, seq {SEQ}; "
          f"medians of {repeats} fresh processes (wall / CPU seconds), "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| cache | " + " | ".join(PHASES) + " | compile + first call | all |")
    print("|---|" + "---|" * (len(PHASES) + 2))
    for state, results in runs.items():
        cells = []
        for name in (*PHASES, "to result", "all"):
            wall, cpu = zip(*(_phase(r["phases"], name) for r in results))
            cells.append(f"{statistics.median(wall):.2f} / {statistics.median(cpu):.2f}")
        print(f"| {state} | " + " | ".join(cells) + " |")
    print("callbacks:", sorted({f for r in runs["warm"] for f in r["fallbacks"]}) or "none")


def _phase(phases: dict, name: str) -> tuple[float, float]:
    chosen = {"to result": ("compile", "first call"), "all": PHASES}.get(name, (name,))
    return sum(phases[p][0] for p in chosen), sum(phases[p][1] for p in chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--first-result", action="store_true")
    parser.add_argument("--threads", type=int, default=0, help="0: threads=None (the default)")
    args = parser.parse_args()
    if args.first_result:
        first_result(args.layers, args.repeats, args.threads)
        return
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        g = build_bert(args.layers)
        times.append(time.perf_counter() - start)
    params, nbytes = g.parameter_count()
    median = statistics.median(times)
    print(f"nodes:      {len(g):,}")
    print(f"parameters: {params:,} ({nbytes / 2**20:.1f} MiB float32)")
    print(
        f"build time: {median * 1e3:.1f} ms median of {args.repeats} "
        f"({median / len(g) * 1e6:.1f} us per node; min {min(times) * 1e3:.1f} ms)"
    )


if __name__ == "__main__":
    main()
