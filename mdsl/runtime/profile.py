"""The profiler: `exe.profile(feeds, runs=10)` times every kernel of a compiled graph.

What is timed, per backend:

- "c": a profiling build of the variant, `render_units(plan, profile=True)`, a separate
  library in the build cache whose `mdsl_run_profile` reads CLOCK_MONOTONIC around each
  kernel call. The normal build has no timers, so profiling costs nothing when unused.
- "numba": each kernel call of the Python driver (a timed copy of the generated `run`,
  calling the same compiled numba functions).
- "python": each node of the interpreter (the "kernels" are the graph's nodes).

FLOPs and bytes per kernel come from the Kernel IR: a GEMM does 2*M*N*K per batch, a
convolution 2*N*Cout*OH*OW*(Cin/groups)*KH*KW, a pooling window one op per element;
pointwise and row kernels count one op per element per operation of their expressions
(an exp, a compare or a select count one each; loads, constants and casts count none),
epilogues likewise over the GEMM/convolution output. Bytes are the sizes of the buffers a
kernel reads plus those it writes (no cache modelling). A Python callback, and each node
the python backend interprets, is costed by the one cost model, `mdsl.passes.cost`
(`node_flops(..., counted=True)`: MatMul/Gemm/Conv/Einsum formulas, an expression's op
count per element, one op per input element for reductions, none for data movement).

>>> import numpy as np, mdsl
>>> with mdsl.Graph("mlp") as g:
...     x = g.input("x", (64, 32))
...     h = mdsl.ops.relu(x @ mdsl.param("w", (32, 16)))
...     g.output(mdsl.ops.exp(h), "y")
>>> prof = mdsl.compile(g, backend="c").profile({"x": np.ones((64, 32), np.float32)}, runs=2)
>>> [(k.op_type, k.flops) for k in prof.kernels]
[('MatMul+Relu+Exp', 67584)]
>>> prof.kernels[0].flops == 2 * 64 * 16 * 32 + 2 * 64 * 16   # GEMM + relu, exp epilogue
True
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mdsl.codegen import kir
from mdsl.codegen.concat_in_place import in_place_note
from mdsl.ir.errors import ExecutionError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node
from mdsl.ir.html import escape, html_block, html_table
from mdsl.ir.text import WIDTH, clip, shorten_path
from mdsl.log import format_seconds
from mdsl.passes import cost
from mdsl.passes.cost import expression_ops
from mdsl.targets.feeds import bind_feeds

TABLE_WIDTH = WIDTH
TOP = 15
LAYER_DEPTH = 2
BUSY_SPREAD = 0.25  # run-time IQR above this share of the median: the machine was busy


# -- the result ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KernelProfile:
    """One kernel (a node, for the python backend) over every timed run.

    `starts[r]` is when it began in run r (seconds after that run began), `times[r]` how
    long it took; `flops` and `bytes` are per run (see the module doc)."""

    name: str
    kind: str
    op_type: str  # the op types of its nodes, "MatMul+Relu"
    layer: str  # the deepest layer path holding all its nodes ("" for the top level)
    nodes: tuple[str, ...]
    flops: int
    bytes: int
    starts: tuple[float, ...]
    times: tuple[float, ...]

    @property
    def mean(self) -> float:
        """Mean seconds per run."""
        return float(np.mean(self.times)) if self.times else 0.0

    @property
    def median(self) -> float:
        """Median seconds per run: what the tables show (robust to a busy moment)."""
        return float(np.median(self.times)) if self.times else 0.0

    @property
    def iqr(self) -> float:
        """Interquartile range of the run times, in seconds (the spread)."""
        return _iqr(self.times)

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s over the median time (nan when too fast to time)."""
        return _rate(self.flops, self.median)

    @property
    def gbps(self) -> float:
        """Achieved GB/s over the median time (nan when too fast to time)."""
        return _rate(self.bytes, self.median)


@dataclass(frozen=True, slots=True)
class ProfileGroup:
    """Kernels sharing a key (an op type, a layer path), summed."""

    key: str
    kernels: int
    seconds: float  # median seconds per run, summed over the kernels
    flops: int
    bytes: int

    @property
    def gflops(self) -> float:
        return _rate(self.flops, self.seconds)

    @property
    def gbps(self) -> float:
        return _rate(self.bytes, self.seconds)


@dataclass
class Profile:
    """What `exe.profile` measured: `.kernels` in schedule order, `.wall` (seconds of each
    whole run, as `exe.run` takes it), `.table()` and `.to_chrome_trace(path)`."""

    graph: str
    backend: str
    kernels: list[KernelProfile]
    wall: tuple[float, ...]
    run_starts: tuple[float, ...]  # time.perf_counter() at each run's start
    symbols: dict[str, int] = field(default_factory=dict)
    timed: str = "kernels"  # or "nodes", for a variant without Kernel IR (python)
    compile_seconds: float = 0.0  # building the variant and its profiling build: not in `wall`
    notes: tuple[str, ...] = ()  # what the plan did that no kernel row shows

    @property
    def runs(self) -> int:
        return len(self.wall)

    @property
    def unit(self) -> str:
        """What was timed: "kernels", or "nodes" for the python backend."""
        return self.timed

    @property
    def wall_mean(self) -> float:
        return float(np.mean(self.wall)) if self.wall else 0.0

    @property
    def wall_median(self) -> float:
        """Median seconds of a whole run."""
        return float(np.median(self.wall)) if self.wall else 0.0

    @property
    def wall_iqr(self) -> float:
        """Interquartile range of the whole-run times, in seconds."""
        return _iqr(self.wall)

    @property
    def busy(self) -> bool:
        """Whether the spread of the run times says the machine was busy: the IQR is more
        than BUSY_SPREAD of the median (a quiet machine repeats a run within a few %)."""
        median = self.wall_median
        return self.runs >= 4 and median > 0 and self.wall_iqr > BUSY_SPREAD * median

    @property
    def kernel_seconds(self) -> float:
        """Median seconds per run spent inside kernels, summed (the rest is call overhead)."""
        return sum(k.median for k in self.kernels)

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels)

    @property
    def bytes(self) -> int:
        return sum(k.bytes for k in self.kernels)

    def by(self, key: str, depth: int = LAYER_DEPTH) -> list[ProfileGroup]:
        """Kernels grouped by "kernel", "op" (op types) or "layer" (path cut to `depth`
        parts), most time first."""
        keys = {
            "kernel": lambda k: k.name,
            "op": lambda k: k.op_type,
            "layer": lambda k: _layer_prefix(k.layer, depth),
        }
        if key not in keys:
            raise ExecutionError(f"profile groups are kernel, op or layer, not {key!r}")
        groups: dict[str, list[KernelProfile]] = {}
        for k in self.kernels:
            groups.setdefault(keys[key](k), []).append(k)
        rows = [
            ProfileGroup(
                name,
                len(ks),
                sum(k.median for k in ks),
                sum(k.flops for k in ks),
                sum(k.bytes for k in ks),
            )
            for name, ks in groups.items()
        ]
        return sorted(rows, key=lambda r: -r.seconds)

    # -- text ---------------------------------------------------------------------------------
    def summary(self) -> str:
        shape = " ".join(f"{s}={v}" for s, v in sorted(self.symbols.items()))
        where = f"{self.backend}, {shape}" if shape else self.backend
        unit = self.unit
        median = self.wall_median
        wall = (
            f"run {_us(median)} us median (IQR {_us(self.wall_iqr)} us, "
            f"min {_us(min(self.wall, default=0.0))})"
        )
        inside = self.kernel_seconds
        share = f" = {100 * inside / median:.0f}% of it" if median else ""
        lines = [
            f"profile {self.graph!r} ({where}): {self.runs} runs, {len(self.kernels)} {unit}",
            f"{wall}, {unit} {_us(inside)} us{share}",
            f"{_count(self.flops)}FLOP and {_count(self.bytes)}B a run: "
            f"{_fixed(_rate(self.flops, inside))} GFLOP/s, "
            f"{_fixed(_rate(self.bytes, inside))} GB/s in {unit}",
            f"compile {format_seconds(self.compile_seconds)} before the runs (not in the times above)",
            *self.notes,
        ]
        if self.busy:
            lines.append(
                f"warning: run times spread widely (IQR {100 * self.wall_iqr / median:.0f}% "
                "of the median): the machine was busy; rerun on a quiet machine or with more runs"
            )
        return "\n".join(lines)

    def table(self, top: int = TOP, depth: int = LAYER_DEPTH, width: int = TABLE_WIDTH) -> str:
        """The summary, then the `top` kernels, op types and layers (to `depth` path parts)
        by time, in at most `width` columns."""
        total = self.kernel_seconds
        lines = self.summary().splitlines()
        lines += ["", *self._kernel_lines(top, total, width)]
        for key, title in (("op", "op type"), ("layer", f"layer (depth {depth})")):
            lines += ["", *self._group_lines(self.by(key, depth), title, top, total, width)]
        return "\n".join(clip(line, width) for line in lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (
            f"Profile({self.graph!r}, {self.backend}: {self.runs} runs, {len(self.kernels)} "
            f"{self.unit}, median {_us(self.wall_median)} us)"
        )

    def _repr_html_(self) -> str:
        """The summary and the kernels by time (for notebooks)."""
        ranked = sorted(self.kernels, key=lambda k: -k.median)
        rows = [
            [k.name, k.op_type, k.layer or "(top)", _us(k.median), _us(k.iqr), _fixed(k.gflops)]
            for k in ranked[:TOP]
        ]
        headers = [self.unit[:-1], "op types", "layer", "median us", "IQR us", "GFLOP/s"]
        summary = "".join(f"<p>{escape(line)}</p>" for line in self.summary().splitlines()[1:])
        return html_block(self.summary().splitlines()[0], summary, html_table(headers, rows))

    def _kernel_lines(self, top: int, total: float, width: int) -> list[str]:
        name_w, op_w = 20, 16
        layer_w = max(8, width - name_w - op_w - len(_numbers_header()) - 2)
        head = f"{self.unit[:-1]:<{name_w}} {'op types':<{op_w}} {'layer':<{layer_w}}"
        lines = [head + _numbers_header()]
        ranked = sorted(self.kernels, key=lambda k: -k.median)
        for k in ranked[:top]:
            cells = (
                f"{clip(_local_name(k), name_w):<{name_w}} {clip(k.op_type, op_w):<{op_w}} "
                f"{shorten_path(k.layer or '(top)', layer_w):<{layer_w}}"
            )
            lines.append(cells + _numbers(k.median, total, k.gflops, k.gbps))
        lines += _rest_line(ranked[top:], total, self.unit)
        return lines

    def _group_lines(self, groups, title: str, top: int, total: float, width: int) -> list[str]:
        key_w = max(12, width - 8 - len(_numbers_header()))
        lines = [f"{title:<{key_w}} {self.unit:>7}" + _numbers_header()]
        for g in groups[:top]:
            label = shorten_path(g.key or "(top)", key_w)
            lines.append(
                f"{label:<{key_w}} {g.kernels:>7}" + _numbers(g.seconds, total, g.gflops, g.gbps)
            )
        rest = groups[top:]
        if rest:
            seconds = sum(g.seconds for g in rest)
            lines.append(f"  (+{len(rest)} more: {_us(seconds)} us, {_pct(seconds, total)}%)")
        return lines

    # -- Chrome trace -------------------------------------------------------------------------
    def trace_events(self) -> list[dict]:
        """Chrome trace events, times in microseconds from the first run's start.

        Track 1 holds one slice per run; each top-level layer gets a track of its own, with
        one slice per run spanning the layer's kernels and the kernels nested in it, so
        Perfetto shows the layers as a hierarchy. Kernels outside any layer are on "(top)".
        """
        pid = 1
        unit = self.timed[:-1]
        tracks = self._layer_tracks()
        events: list[dict] = [
            _meta("process_name", pid, None, f"mdsl {self.graph} ({self.backend})"),
            _meta("thread_name", pid, 1, "runs"),
        ]
        events += [
            _meta("thread_name", pid, tid, layer or "(top)") for layer, tid in tracks.items()
        ]
        events += [_meta("thread_sort_index", pid, tid, str(tid)) for tid in [1, *tracks.values()]]
        origin = self.run_starts[0] if self.run_starts else 0.0
        for r, (start, wall) in enumerate(zip(self.run_starts, self.wall)):
            base = (start - origin) * 1e6
            events.append(_complete(f"run {r}", "run", base, wall * 1e6, pid, 1, {"run": r}))
            events += self._layer_slices(r, base, tracks, pid)
            for k in self.kernels:
                args = {
                    unit: k.name,
                    "nodes": list(k.nodes),
                    "op_type": k.op_type,
                    "layer": k.layer,
                    "flops": k.flops,
                    "bytes": k.bytes,
                    "GFLOP/s": _json_rate(k.flops, k.times[r]),
                    "GB/s": _json_rate(k.bytes, k.times[r]),
                }
                ts = base + k.starts[r] * 1e6
                tid = tracks[_top_layer(k.layer)]
                events.append(_complete(k.name, k.kind, ts, k.times[r] * 1e6, pid, tid, args))
        return events

    def _layer_tracks(self) -> dict[str, int]:
        """Top-level layer -> track id (2, 3, ... in the order their kernels run)."""
        tracks: dict[str, int] = {}
        for k in self.kernels:
            tracks.setdefault(_top_layer(k.layer), len(tracks) + 2)
        return tracks

    def _layer_slices(self, r: int, base: float, tracks: dict[str, int], pid: int) -> list:
        spans: dict[str, list[float]] = {}
        for k in self.kernels:
            layer = _top_layer(k.layer)
            if not layer:
                continue
            begin, end = k.starts[r], k.starts[r] + k.times[r]
            span = spans.setdefault(layer, [begin, end])
            span[0], span[1] = min(span[0], begin), max(span[1], end)
        return [
            _complete(layer, "layer", base + b * 1e6, (e - b) * 1e6, pid, tracks[layer], {"run": r})
            for layer, (b, e) in spans.items()
        ]

    def to_chrome_trace(self, path) -> Path:
        """Write the trace (JSON, Chrome trace event format) that Perfetto
        (ui.perfetto.dev) and chrome://tracing open; returns the path."""
        doc = {
            "traceEvents": self.trace_events(),
            "displayTimeUnit": "ms",
            "otherData": {
                "graph": self.graph,
                "backend": self.backend,
                "runs": self.runs,
                "symbols": dict(self.symbols),
                "compile_seconds": self.compile_seconds,
            },
        }
        target = Path(os.fspath(path))
        try:
            target.write_text(json.dumps(doc, allow_nan=False))
        except OSError as e:
            raise ExecutionError(f"cannot write the trace {target}: {e.strerror or e}") from None
        return target


def _top_layer(layer: str) -> str:
    return layer.split("/", 1)[0]


def _iqr(times) -> float:
    if len(times) < 2:
        return 0.0
    q1, q3 = np.percentile(times, [25, 75])
    return float(q3 - q1)


def _meta(name: str, pid: int, tid: int | None, value: str) -> dict:
    key = "sort_index" if name.endswith("sort_index") else "name"
    event = {
        "name": name,
        "ph": "M",
        "pid": pid,
        "args": {key: int(value) if key == "sort_index" else value},
    }
    if tid is not None:
        event["tid"] = tid
    return event


def _complete(name, category, ts: float, dur: float, pid, tid, args) -> dict:
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "ts": round(ts, 3),
        "dur": round(dur, 3),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


# -- formatting ------------------------------------------------------------------------------
def _rate(amount: int, seconds: float) -> float:
    return amount / seconds / 1e9 if seconds > 0 else float("nan")


def _json_rate(amount: int, seconds: float) -> float | None:
    return round(amount / seconds / 1e9, 4) if seconds > 0 else None


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def _pct(part: float, total: float) -> str:
    return f"{100 * part / total:.1f}" if total > 0 else "-"


def _fixed(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}"


def _count(n: float) -> str:
    """12.6 M, 3.1 G: the number with an SI prefix (for FLOP and B)."""
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {prefix}"
    return f"{n:g} "


def _numbers_header() -> str:
    return f" {'us':>9} {'%':>5} {'GFLOP/s':>8} {'GB/s':>7}"


def _numbers(seconds: float, total: float, gflops: float, gbps: float) -> str:
    return f" {_us(seconds):>9} {_pct(seconds, total):>5} {_fixed(gflops):>8} {_fixed(gbps):>7}"


def _rest_line(rest: list[KernelProfile], total: float, what: str) -> list[str]:
    if not rest:
        return []
    seconds = sum(k.median for k in rest)
    return [f"  (+{len(rest)} more {what}: {_us(seconds)} us, {_pct(seconds, total)}%)"]


def _local_name(k: KernelProfile) -> str:
    """A node's name without its layer path (shown beside it); kernel names as they are."""
    prefix = k.layer + "/"
    return k.name[len(prefix) :] if k.layer and k.name.startswith(prefix) else k.name


def _layer_prefix(layer: str, depth: int) -> str:
    return "/".join(layer.split("/")[:depth]) if layer else ""


def _common_layer(layers: list[str]) -> str:
    """The deepest layer path holding every one of `layers`."""
    if not layers:
        return ""
    parts = [layer.split("/") if layer else [] for layer in layers]
    common = []
    for level in zip(*parts):
        if any(p != level[0] for p in level):
            break
        common.append(level[0])
    return "/".join(common)


# -- costs: Kernel IR kernels counted here, nodes by the one cost model (passes.cost) ---------
def kernel_flops(k, node_of: Mapping[str, Node], symbols: Mapping[str, int] | None = None) -> int:
    """The FLOPs of one run of Kernel IR record `k` (see the module doc); an expression
    of the plan's slot symbols when its sizes are symbolic (`symbols`: the graph's
    symbols' values, for the nodes of callbacks). Control flow counts none itself: the
    kernels of its blocks count."""
    if isinstance(k, kir.Pointwise):
        values = [let.value for let in k.lets] + [s.value for s in k.stores]
        return k.size * _ops_each(values)
    if isinstance(k, kir.Rowwise):
        return k.outer_size * sum(_phase_ops(p, k.row_size) for p in k.phases)
    if isinstance(k, kir.Gemm):
        batch = math.prod(k.batch_shape)
        return 2 * batch * k.m * k.n * k.k + _epilogue_ops(k.epilogue) * batch * k.m * k.n
    if isinstance(k, kir.Conv):
        outputs = k.n * k.cout * k.oh * k.ow
        per_output = (k.c // k.group) * k.kh * k.kw
        # oneDNN's bias and post-ops (`kir.Conv.post_ops`): a clip is a max and a min
        fused = bool(k.bias) + sum(2 if op[0] == "clip" else 1 for op in k.post_ops) + k.silu
        return 2 * outputs * per_output + (_epilogue_ops(k.epilogue) + fused) * outputs
    if isinstance(k, kir.Pool):
        return k.n * k.c * math.prod(k.out_spatial) * math.prod(k.kernel)
    if isinstance(k, (kir.Callback, kir.CustomCall)):
        nodes = [node_of[ref.name] for ref in k.nodes if ref.name in node_of]
        return sum(
            node_flops(n, _static_shapes(n.inputs, symbols), _static_shapes(n.outputs, symbols))
            for n in nodes
        )
    return 0


def _ops_each(values: list) -> int:
    """Ops of each expression counted separately (lets refer to each other by name)."""
    return sum(expression_ops(v) for v in values)


def _phase_ops(phase, row_size: int) -> int:
    per_element = _ops_each([let.value for let in getattr(phase, "lets", [])])
    if isinstance(phase, kir.Reduce):
        return row_size * (expression_ops(phase.value) + per_element + 1)  # + the combine
    if isinstance(phase, kir.RowStore):
        return row_size * (expression_ops(phase.value) + per_element)
    return expression_ops(phase.value)  # Let, Store: once per row


def _epilogue_ops(ep: kir.Epilogue | None) -> int:
    if ep is None:
        return 0
    return _ops_each([let.value for let in ep.lets] + [s.value for s in ep.stores])


def kernel_bytes(k, buffers: Mapping) -> int:
    """Bytes of the buffers `k` reads plus those it writes."""
    from mdsl.codegen.plan import kernel_buffers

    reads, writes = kernel_buffers(k)
    return sum(buffers[b].nbytes for b in reads) + sum(buffers[b].nbytes for b in writes)


def node_flops(node: Node, input_shapes: list, output_shapes: list) -> int:
    """One node's FLOPs from its op and shapes (None: an absent input), as the profiler
    counts them (`mdsl.passes.cost.node_flops`)."""
    if not output_shapes or output_shapes[0] is None:
        return 0
    return cost.node_flops(node, input_shapes, output_shapes[0], counted=True)


def node_bytes(node: Node, input_shapes: list, output_shapes: list) -> int:
    return cost.tensors_bytes([*node.inputs, *node.outputs], [*input_shapes, *output_shapes])


def _static_shapes(tensors, symbols: Mapping[str, int] | None = None) -> list:
    from mdsl.ir.dim import evaluate_dims

    return [
        None if t is None else tuple(int(d) for d in evaluate_dims(tuple(t.shape), symbols or {}))
        for t in tensors
    ]


# -- timed runners: (units, run(env) -> (kernels, 2) array of start offset, duration) ----------
@dataclass(frozen=True, slots=True)
class _Unit:
    name: str
    kind: str
    op_type: str
    layer: str
    nodes: tuple[str, ...]
    flops: int
    bytes: int


def _plan_units(variant, symbols: Mapping[str, int] | None = None) -> list[_Unit]:
    """One unit per kernel of a compiled variant's plan (those inside control flow too);
    symbolic sizes evaluated for `symbols` (dynamic dims at their largest)."""
    from mdsl.codegen.dims import evaluate_size
    from mdsl.ir.rewrite import all_graphs

    plan = variant.plan
    node_of = {n.name: n for g in all_graphs(plan.graph) for n in g}
    slots, names = plan.bound_values(symbols or {})
    units = []
    for k, info in zip(plan.all_kernels(), variant.kernel_infos()):
        nodes = [node_of[r.name] for r in k.nodes if r.name in node_of]
        op_types = dict.fromkeys(r.op_type for r in k.nodes)
        units.append(
            _Unit(
                k.name,
                info.kind,
                "+".join(op_types) or "?",
                _common_layer([n.layer for n in nodes]),
                tuple(r.name for r in k.nodes),
                evaluate_size(kernel_flops(k, node_of, names), slots),
                evaluate_size(kernel_bytes(k, plan.buffers), slots),
            )
        )
    return units


def _node_units(graph: Graph, symbols: dict[str, int]) -> list[_Unit]:
    """One unit per node a variant without Kernel IR times: every node but the inputs,
    constants and outputs, in order (the rows of its `run_profiled` timings)."""
    units = []
    for node in graph:
        if node.op_type in (INPUT, CONST, OUTPUT):
            continue
        ins, outs = _known_shapes(node.inputs, symbols), _known_shapes(node.outputs, symbols)
        tensors = zip([*node.inputs, *node.outputs], [*ins, *outs])
        known = all(s is not None for t, s in tensors if t is not None)
        flops = node_flops(node, ins, outs) if known else 0
        nbytes = node_bytes(node, ins, outs) if known else 0
        units.append(
            _Unit(node.name, node.op_type, node.op_type, node.layer, (node.name,), flops, nbytes)
        )
    return units


def _known_shapes(tensors, symbols: dict[str, int]) -> list:
    from mdsl.targets.feeds import concrete_shape

    shapes = []
    for t in tensors:
        try:
            shapes.append(None if t is None else concrete_shape(t.shape, symbols))
        except MdslError:  # a data-dependent dim
            shapes.append(None)
    return shapes


def _units(exe, variant, symbols: dict[str, int]) -> list[_Unit]:
    if not callable(getattr(variant, "run_profiled", None)):
        raise ExecutionError(f"backend {exe.backend.name!r} cannot be profiled")
    if variant.plan is None:
        return _node_units(variant.graph, symbols)
    return _plan_units(variant, symbols)


# -- the entry point ---------------------------------------------------------------------------
def profile_executable(exe, feeds: Mapping[str, np.ndarray], runs: int = 10, warmup: int = 1):
    """`exe.profile(feeds, runs, warmup=...)`: see `mdsl.runtime.executable.Executable`."""
    for name, value, least in (("runs", runs, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ExecutionError(f"profile: {name} must be an int >= {least}, got {value!r}")
    env, symbols = bind_feeds(exe.graph, feeds)
    compile_start = time.perf_counter()
    variant = exe._variant(symbols)
    units = _units(exe, variant, symbols)
    setup_seconds = time.perf_counter() - compile_start
    first_run = 0.0
    for i in range(warmup):
        start = time.perf_counter()
        variant.run_profiled(env)
        first_run = time.perf_counter() - start if i == 0 else first_run
    rows, wall, starts = [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        rows.append(variant.run_profiled(env)[1])
        wall.append(time.perf_counter() - start)
        starts.append(start)
    timings = np.stack(rows) if rows else np.zeros((0, len(units), 2))
    # what the first call costs beyond a run (the profiling build, numba's first compile)
    compile_seconds = setup_seconds + max(0.0, first_run - float(np.median(wall)))
    kernels = [
        KernelProfile(
            u.name,
            u.kind,
            u.op_type,
            u.layer,
            u.nodes,
            u.flops,
            u.bytes,
            tuple(float(s) for s in timings[:, i, 0]),
            tuple(float(d) for d in timings[:, i, 1]),
        )
        for i, u in enumerate(units)
    ]
    timed = "kernels" if variant.plan is not None else "nodes"
    note = in_place_note(variant.plan) if variant.plan is not None else ""
    return Profile(
        exe.graph.name,
        exe.backend.name,
        kernels,
        tuple(wall),
        tuple(starts),
        symbols,
        timed,
        compile_seconds,
        (note,) if note else (),
    )
