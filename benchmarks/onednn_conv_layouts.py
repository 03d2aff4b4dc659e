"""One light model's convolutions as single oneDNN primitives, each in two activation
layouts: channels last (NHWC: what oneDNN 3.2 picks for fp32 on AVX-512, its `brgconv`
kernels) and nChw16c (its older `jit` kernels; `mdsl.codegen.packing.activation_tag`).
Every distinct (2-D, one group) convolution shape of the model runs alone on its cached
input with bias and ReLU as post-ops, the layouts taking turns call by call: thread CPU
time at 1 thread, wall time at more (`--threads 2`; the team is OpenMP's, as in the
generated code). Medians over `--calls` calls, with ORT's per-node time beside when
`--ort` is given (its profiler, `SessionOptions.enable_profiling`, on the same model).

    python benchmarks/onednn_conv_layouts.py --only squeezenet --threads 2
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdsl.codegen import onednn as D
from mdsl.frontends import onnx_light_models as light

LAYOUTS = {"NHWC": "acdb", "nChw16c": "aBcd16b"}


def conv_shapes(model) -> dict[str, D.ConvShape]:
    """The model's distinct 2-D one-group convolutions, by a readable key."""
    from mdsl.frontends.onnx_import import import_model

    shapes = {}
    for node in import_model(model).nodes:
        if node.op_type != "Conv" or node.attrs.get("group", 1) != 1:
            continue
        attrs, w = node.attrs, tuple(node.inputs[1].shape)
        if len(w) != 4:
            continue
        x, y = tuple(node.inputs[0].shape), tuple(node.outputs[0].shape)
        pads = attrs.get("pads") or (0, 0, 0, 0)
        shapes[conv_key(x, w, y)] = D.ConvShape(
            x,
            w,
            y,
            tuple(attrs.get("strides") or (1, 1)),
            tuple(d - 1 for d in attrs.get("dilations") or (1, 1)),
            tuple(pads[:2]),
            tuple(pads[2:]),
            True,
            (("relu",),),
        )
    return shapes


def conv_key(x, w, y) -> str:
    return f"{x[1]}->{w[0]} {w[2]}x{w[3]} {x[2]}x{x[3]}->{y[2]}x{y[3]}"


def padded_key(shape: D.ConvShape) -> str:
    """`conv_key` of `shape` with its output channels a multiple of 16, as ORT's NCHWc
    transformer pads them (SqueezeNet's 1000 classes: 1008)."""
    cout = -(-shape.w[0] // 16) * 16
    return conv_key(shape.x, (cout, *shape.w[1:]), (shape.y[0], cout, *shape.y[2:]))


class Primitive:
    """A convolution primitive of `shape` in activation layout `tag`, made and run at
    `threads`, on random data in the layouts it chose."""

    def __init__(self, shape: D.ConvShape, tag: str, threads: int):
        self.conv = D._Conv(replace(shape, act_tag=tag), threads)
        ffi, lib = self.conv.ffi, self.conv.lib
        self.impl = self.conv.impl() if self.conv.ok else "-"
        if not self.conv.ok:
            return
        self.prim = ffi.new("dnnl_primitive_t *")
        with D._planning_threads(threads):
            assert lib.dnnl_primitive_create(self.prim, self.conv.pd[0]) == 0
        self.stream = ffi.new("dnnl_stream_t *")
        lib.dnnl_stream_create(self.stream, self.conv.engine[0], D.STREAM_DEFAULT)
        mds = [
            (D.ARG_SRC, self.conv.query(D.QUERY_SRC_MD)),
            (D.ARG_WEIGHTS, self.conv.query(D.QUERY_WEIGHTS_MD)),
            (D.ARG_DST, self.conv.query(D.QUERY_DST_MD)),
            (D.ARG_BIAS, self.conv.md((shape.y[1],))),
        ]
        rng = np.random.default_rng(0)
        self.buffers, args = [], []
        for arg, md in mds:
            floats = lib.dnnl_memory_desc_get_size(md) // 4
            buf = rng.standard_normal(floats).astype(np.float32)
            mem = ffi.new("dnnl_memory_t *")
            lib.dnnl_memory_create(mem, md, self.conv.engine[0], ffi.from_buffer(buf))
            self.buffers.append(buf)
            args.append((arg, mem[0]))
        self.args = ffi.new(f"dnnl_exec_arg_t[{len(args)}]", args)

    def __call__(self):
        self.conv.lib.dnnl_primitive_execute(self.prim[0], self.stream[0], 4, self.args)


def time_turns(fns: dict, calls: int, clock) -> dict[str, float]:
    """Median seconds of each of `fns`, called in turns."""
    for fn in fns.values():
        for _ in range(10):
            fn()
    times = {k: [] for k in fns}
    for _ in range(calls):
        for key, fn in fns.items():
            t0 = clock()
            fn()
            times[key].append(clock() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def ort_node_times(model, threads: int, runs: int = 100) -> dict[str, list[float]]:
    """ORT's per-node kernel times (seconds, medians) by convolution key."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.log_severity_level = 3
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ort")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = light.random_feeds(model, 0)
    for _ in range(runs):
        sess.run(None, feeds)
    nodes: dict[tuple[str, str], list[float]] = {}
    for event in json.loads(Path(sess.end_profiling()).read_text()):
        args = event.get("args", {})
        if event.get("cat") != "Node" or not args.get("op_name", "").endswith("Conv"):
            continue
        if not event["name"].endswith("_kernel_time"):
            continue
        shapes = [next(iter(d.values())) for d in args["input_type_shape"]]
        y = next(iter(args["output_type_shape"][0].values()))
        key = conv_key(shapes[0], shapes[1], y)
        nodes.setdefault((key, event["name"]), []).append(event["dur"] * 1e-6)
    out: dict[str, list[float]] = {}
    for (key, _), durations in nodes.items():
        out.setdefault(key, []).append(statistics.median(durations))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="squeezenet")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--ort", action="store_true", help="ORT's per-node times beside")
    args = parser.parse_args(argv)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    ctypes.CDLL("libgomp.so.1").omp_set_num_threads(args.threads)
    what = "thread CPU" if args.threads == 1 else "wall"
    print(f"{args.threads} thread(s), {what} time, us (median of {args.calls} calls)")
    for name in args.only.split(","):
        model = light.logits_model(light.with_random_weights(light.load_light_model(name), 0))
        ort_times = ort_node_times(model, args.threads) if args.ort else {}
        print(f"\n{name}\n| conv | NHWC | nChw16c | nChw16c / NHWC | ORT (per node) |")
        print("|---|---|---|---|---|")
        for key, shape in conv_shapes(model).items():
            prims = {layout: Primitive(shape, tag, args.threads) for layout, tag in LAYOUTS.items()}
            runnable = {k: p for k, p in prims.items() if p.impl.startswith(D.FAST_IMPLS)}
            t = time_turns(runnable, args.calls, clock)
            cells = [
                f"{1e6 * t[k]:.0f} {prims[k].impl.split(':')[0]}" if k in t else prims[k].impl
                for k in LAYOUTS
            ]
            ratio = f"{t['nChw16c'] / t['NHWC']:.2f}" if len(t) == 2 else "-"
            ort = ort_times.get(key) or ort_times.get(padded_key(shape), [])
            ort_cell = ", ".join(f"{1e6 * v:.0f}" for v in ort) or "-"
            print(f"| {key} | {cells[0]} | {cells[1]} | {ratio} | {ort_cell} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
