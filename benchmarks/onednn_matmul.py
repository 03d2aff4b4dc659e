"""oneDNN matmul against mdsl's packed GEMM and ONNX Runtime: the MLP of W4 and its two
GEMMs alone, side by side in one process (issue 16, item 2).

oneDNN runs each linear layer as one `matmul` primitive: source and destination plain
row-major, weights `format_tag_any` (the primitive's blocked layout, reordered once when
the contender is built), bias as the primitive's bias and exact GELU as an eltwise
post-op. Nothing is converted per call. Calls alternate in rounds (`conv_gemm._interleaved`);
the figure is each contender's median time and its ratio to ORT (median, min-max).

    OMP_NUM_THREADS=1 python benchmarks/onednn_matmul.py --cpu-time
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import conv_gemm  # noqa: E402
import onnx_graphs  # noqa: E402
from onednn_chain import _FFI, _check, lib  # noqa: E402
from onnx_graphs import OnnxBuilder  # noqa: E402

import mdsl  # noqa: E402
from mdsl.codegen import onednn as D  # noqa: E402
from mdsl.frontends import onnx as mdsl_onnx  # noqa: E402

_FFI.cdef(
    """
dnnl_status_t dnnl_matmul_primitive_desc_create(dnnl_primitive_desc_t *pd,
    dnnl_engine_t engine, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t bias_desc,
    const_dnnl_memory_desc_t dst_desc, dnnl_primitive_attr_t attr);
"""
)
ELTWISE_GELU_ERF = 0x31


class MatMul:
    """y = act(x @ w + b), x [m, k] and y [m, n] plain, w reordered once."""

    def __init__(self, m: int, w: np.ndarray, b: np.ndarray, gelu: bool):
        L = self.L = lib()
        k, n = w.shape
        src, dst, bias = L.plain_md((m, k)), L.plain_md((m, n)), L.plain_md((1, n))
        ops = _FFI.new("dnnl_post_ops_t *")
        _check(L.lib.dnnl_post_ops_create(ops), "post ops")
        if gelu:
            _check(L.lib.dnnl_post_ops_append_eltwise(ops[0], ELTWISE_GELU_ERF, 0.0, 0.0), "gelu")
        attr = _FFI.new("dnnl_primitive_attr_t *")
        _check(L.lib.dnnl_primitive_attr_create(attr), "attr")
        _check(L.lib.dnnl_primitive_attr_set_post_ops(attr[0], ops[0]), "attr post ops")
        pd = _FFI.new("dnnl_primitive_desc_t *")
        _check(
            L.lib.dnnl_matmul_primitive_desc_create(
                pd, L.engine, src, L.any_md((k, n)), bias, dst, attr[0]
            ),
            "matmul pd",
        )
        impl = _FFI.new("char **")
        L.lib.dnnl_primitive_desc_query(pd[0], D.QUERY_IMPL_INFO_STR, 0, impl)
        self.impl = _FFI.string(impl[0]).decode()
        blocked = L.lib.dnnl_primitive_desc_query_md(pd[0], D.QUERY_WEIGHTS_MD, 0)
        self.w = np.zeros(-(-L.lib.dnnl_memory_desc_get_size(blocked) // 4), np.float32)
        self.b = np.ascontiguousarray(b, np.float32)
        self._reorder(L.plain_md((k, n)), blocked, np.ascontiguousarray(w, np.float32))
        prim = _FFI.new("dnnl_primitive_t *")
        _check(L.lib.dnnl_primitive_create(prim, pd[0]), "matmul primitive")
        self.prim = prim[0]
        self.x_mem, self.y_mem = L.memory(src, self.b), L.memory(dst, self.b)
        self.out = np.zeros((m, n), np.float32)
        L.lib.dnnl_memory_set_data_handle(self.y_mem, _FFI.cast("void *", self.out.ctypes.data))
        w_mem, b_mem = L.memory(blocked, self.w), L.memory(bias, self.b)
        self.args = _FFI.new(
            "dnnl_exec_arg_t[4]",
            [
                (D.ARG_SRC, self.x_mem),
                (D.ARG_WEIGHTS, w_mem),
                (D.ARG_BIAS, b_mem),
                (D.ARG_DST, self.y_mem),
            ],
        )

    def _reorder(self, plain, blocked, w):
        from onednn_chain import Reorder

        Reorder(plain, blocked)(w, self.w)
        self.L.lib.dnnl_stream_wait(self.L.stream)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        lb = self.L.lib
        lb.dnnl_memory_set_data_handle(self.x_mem, _FFI.cast("void *", x.ctypes.data))
        _check(lb.dnnl_primitive_execute(self.prim, self.L.stream, 4, self.args), "matmul run")
        lb.dnnl_stream_wait(self.L.stream)
        return self.out


def _w(*shape):
    return conv_gemm._w(*shape)


def cases(rows=128, d=768, f=3072):
    """(name, onnx model, feeds, oneDNN contender) for the MLP and each GEMM."""
    w1, b1, w2, b2 = _w(d, f), _w(f), _w(f, d), _w(d)
    x, h = conv_gemm._feed(rows, d), conv_gemm._feed(rows, f)
    out = []
    for name, xs, w, b, gelu in (
        ("gemm 128x768->3072 +bias+gelu", x, w1, b1, True),
        ("gemm 128x3072->768 +bias", h, w2, b2, False),
    ):
        g = OnnxBuilder()
        y = g.linear(g.input("x", xs.shape), w, b)
        y = g.gelu(y) if gelu else y
        model = conv_gemm._finish(g, y, (rows, w.shape[1]))
        mm = MatMul(rows, w, b, gelu)
        out.append((name, model, {"x": xs}, lambda xx, mm=mm: mm(xx), mm.impl))
    g = OnnxBuilder()
    hh = g.gelu(g.linear(g.input("x", (rows, d)), w1, b1))
    model = conv_gemm._finish(g, g.linear(hh, w2, b2), (rows, d))
    m1, m2 = MatMul(rows, w1, b1, True), MatMul(rows, w2, b2, False)
    out.append(("MLP (W4)", model, {"x": x}, lambda xx: m2(m1(xx)), m1.impl))
    return out


def run(budget_s: float) -> list[dict]:
    rows = []
    for name, model, feeds, dnnl, impl in cases():
        graph = mdsl_onnx.load(model)
        exe = mdsl.compile(graph, "c", threads=1)
        with D.disabled():  # plans are made by the first call
            hand = mdsl.compile(graph, "c", threads=1)
            hand(**feeds)
        sess = onnx_graphs.session(model, 1)
        ref = sess.run(None, feeds)[0]
        mine = (("mdsl", exe(**feeds)), ("mdsl-hand", hand(**feeds)), ("dnnl", dnnl(feeds["x"])))
        for who, got in mine:
            got = got if isinstance(got, np.ndarray) else next(iter(got.values()))
            err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
            if err > 1e-4:
                raise AssertionError(f"{name}: {who} differs from ORT by {err:.1e}")
        fns = {
            "ort": lambda s=sess, f=feeds: s.run(None, f),
            "mdsl": lambda e=exe, f=feeds: e(**f),
            "mdsl-hand": lambda e=hand, f=feeds: e(**f),
            "dnnl": lambda d=dnnl, f=feeds: d(f["x"]),
        }
        times = conv_gemm._interleaved(fns, 200, budget_s)
        row = {"case": name, "impl": impl}
        for key, ts in times.items():
            ratios = sorted(a / b for a, b in zip(ts, times["ort"]))
            row[key] = (
                1e3 * statistics.median(ts),
                statistics.median(ratios),
                ratios[0],
                ratios[-1],
            )
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-time", action="store_true", help="thread CPU time, not wall time")
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per case")
    args = ap.parse_args(argv)
    if args.cpu_time:
        conv_gemm.CLOCK[0] = time.thread_time
    print(
        "| case | ORT ms | mdsl-c (oneDNN matmul) ms (ratio to ORT, spread) "
        "| mdsl-c packed GEMM (MDSL_ONEDNN=0) | oneDNN alone, fused post-ops | oneDNN kernel |"
    )
    print("|---|---|---|---|---|---|")
    for r in run(args.budget):
        cell = lambda v: f"{v[0]:.2f} ({v[1]:.2f}, {v[2]:.2f}-{v[3]:.2f})"  # noqa: E731
        cells = " | ".join(cell(r[k]) for k in ("mdsl", "mdsl-hand", "dnnl"))
        print(f"| {r['case']} | {r['ort'][0]:.2f} | {cells} | {r['impl']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
