"""One benchmark process: runs one workload (or the BLAS probe, STREAM, memory or compile
figures) and returns a JSON-ready dict. Started by run.py, one process per key."""

from __future__ import annotations

import ctypes
import importlib.util
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import harness
import numpy as np

NUMBA_MISSING = "numba is not installed"
WORKLOAD_BUDGET_S = 200  # past this, a workload's remaining contenders are skipped
SETTLE_S = 0.2  # at 2+ threads: the spinning worker threads of the last contender sleep


class Skip(Exception):
    """An implementation that cannot run here; the message says why."""


@dataclass
class Impl:
    name: str
    setup: Callable[[int], Callable]  # threads -> a function computing the output
    checks: bool = True


def run(key: str, threads: list[int], build_dir: Path) -> dict:
    special = {
        "blas-probe": probe_blas,
        "STREAM": stream,
        "memory": memory,
        "compile": compile_times,
    }
    if key in special:
        return special[key](threads, build_dir)
    return run_workload(key, threads, build_dir)


# -- a workload, every implementation side by side --------------------------------------------------
def run_workload(key: str, threads: list[int], build_dir: Path) -> dict:
    import hand_c
    import torch
    import workloads

    torch.set_grad_enabled(False)
    wl = workloads.WORKLOADS[key]()
    lib = hand_c.load(build_dir)
    impls = implementations(wl, lib)
    reference = None
    deadline = time.perf_counter() + WORKLOAD_BUDGET_S
    out = {
        "key": key,
        "title": wl.title,
        "notes": wl.notes,
        "bytes_moved": wl.bytes_moved,
        "flops": wl.flops,
        "results": {},
        "compile_s": {},
    }
    for t in threads:
        with _numpy_blas_limit(t):
            torch.set_num_threads(t)
            if reference is None:
                reference = np.asarray(wl.torch(_torch_feeds(wl.feeds)))
            entries, ready = {}, {}
            for impl in impls:
                if time.perf_counter() > deadline:
                    entries[impl.name] = {
                        "skipped": f"over the {WORKLOAD_BUDGET_S} s budget of a workload"
                    }
                    continue
                entries[impl.name], contender = _set_up(
                    impl, t, reference, wl.tol, out["compile_s"]
                )
                if contender is not None:
                    ready[impl.name] = contender
            settle = SETTLE_S if t > 1 else 0.0
            for name, timing in harness.side_by_side(ready, settle_s=settle).items():
                entries[name].update(timing.to_json())
            for impl in impls:
                out["results"].setdefault(impl.name, {})[str(t)] = entries[impl.name]
                _print_entry(key, t, impl.name, entries[impl.name])
    out["kernels"] = _profile_mdsl_c(impls, threads[0], wl.feeds)
    return out


def _profile_mdsl_c(impls: list[Impl], threads: int, feeds: dict) -> list[dict] | str:
    setup = next(i.setup for i in impls if i.name == "mdsl-c")
    exe = getattr(setup, "executables", {}).get(threads)
    if exe is None:
        return "mdsl-c did not compile"
    try:
        _set_threads(exe, threads)
        return kernel_profile(exe, feeds)
    except Exception as e:  # the profiler is a diagnostic; its failure is not fatal
        return f"exe.profile failed: {type(e).__name__}: {str(e)[:200]}"


def _numpy_blas_limit(threads: int):
    """Limits numpy's own OpenBLAS to `threads`. Only numpy's: mdsl's BLAS (another
    OpenBLAS) is mdsl's to configure, torch has set_num_threads and ONNX Runtime a
    session option; a process-wide limit would override what mdsl set."""
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    numpy_libs = [
        i["filepath"]
        for i in controller.info()
        if i.get("internal_api") == "openblas" and "numpy" in i["filepath"]
    ]
    return controller.select(filepath=numpy_libs).limit(limits=threads)


def _set_up(impl: Impl, threads: int, reference, tol: float, compile_s: dict):
    """(entry, contender): its result checked against the reference, and what
    `harness.side_by_side` times (None: it could not run)."""
    try:
        start = time.perf_counter()
        contender = impl.setup(threads)
        if not isinstance(contender, harness.Contender):
            contender = harness.Contender(contender)
        compile_s.setdefault(impl.name, time.perf_counter() - start)
        result = contender.call()
    except Skip as e:
        return {"skipped": str(e)}, None
    except Exception as e:  # a contender failing is a result, not a crash of the benchmark
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}, None
    entry = {}
    if impl.checks:
        got = np.asarray(result, dtype=np.float32).reshape(reference.shape)
        err = float(np.max(np.abs(got - reference)))
        entry["max_abs_err"] = err
        entry["ok"] = bool(err <= tol * max(1.0, float(np.max(np.abs(reference)))))
    return entry, contender


def _print_entry(key: str, t: int, name: str, entry: dict) -> None:
    if "median_s" in entry:
        err = f"  max|err| {entry['max_abs_err']:.1e}" if "max_abs_err" in entry else ""
        bad = "" if entry.get("ok", True) else "  MISMATCH"
        print(
            f"   {key:7s} {t}T {name:14s} {fmt_time(entry['median_s']):>10s}{err}{bad}", flush=True
        )
    else:
        print(
            f"   {key:7s} {t}T {name:14s} {entry.get('skipped') or entry.get('error')}", flush=True
        )


def fmt_time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _torch_feeds(feeds: dict) -> dict:
    import torch

    return {k: torch.from_numpy(v) for k, v in feeds.items()}


def implementations(wl, lib) -> list[Impl]:
    impls = []
    if wl.hand is not None:
        impls.append(Impl("hand-C", _hand_setup(wl, lib, wl.hand)))
        if wl.key.startswith("W1"):
            import workloads

            impls.append(Impl("hand-C libm", _hand_setup(wl, lib, workloads.w1_libm_hand)))
    impls += [
        Impl("mdsl-c", _mdsl_setup(wl, "c")),
        Impl("mdsl-numba", _mdsl_setup(wl, "numba")),
        Impl("onnxruntime", _ort_setup(wl)),
        Impl("torch", _torch_setup(wl)),
        Impl("numpy", lambda t: lambda: wl.numpy(wl.feeds)),
    ]
    if wl.key == "W7":
        impls.append(Impl("bare cffi call", lambda t: lib.hc_noop, checks=False))
    return impls


def _hand_setup(wl, lib, make):
    def setup(threads):
        lib.hc_set_threads(threads)
        fn, out = make(lib, wl.feeds)

        def call():
            fn()
            return out

        return harness.Contender(call, lambda: lib.hc_set_threads(threads))

    return setup


def _mdsl_setup(wl, backend: str):
    import mdsl

    graph = wl.graph()
    executables = {}

    def setup(threads):
        if backend == "numba" and importlib.util.find_spec("numba") is None:
            raise Skip(NUMBA_MISSING)
        exe = executables.get(threads)
        if exe is None:
            exe = executables[threads] = mdsl.compile(graph, backend=backend, threads=threads)
        setup.executables = executables
        feeds = wl.feeds
        exe.run(feeds)  # compiles the variant of graphs with symbolic dims
        _set_threads(exe, threads)
        return harness.Contender(lambda: exe.run(feeds)["y"], lambda: _set_threads(exe, threads))

    return setup


def kernel_profile(exe, feeds: dict, top: int = 8) -> list[dict]:
    """The `top` slowest kernels of one compiled executable (exe.profile, median of 5)."""
    prof = exe.profile(feeds, runs=5)
    rows = []
    total = sum(statistics.median(k.times) for k in prof.kernels) or 1.0
    for k in prof.kernels:
        t = statistics.median(k.times)
        rows.append(
            {
                "name": k.name,
                "kind": k.kind,
                "ops": k.op_type,
                "median_s": t,
                "share": t / total,
                "gflops": k.flops / t / 1e9 if t else 0.0,
                "gbps": k.bytes / t / 1e9 if t else 0.0,
            }
        )
    rows.sort(key=lambda r: -r["median_s"])
    return rows[:top]


def _set_threads(exe, threads: int) -> None:
    """Re-apply the thread count: the C backend sets it only when a variant is loaded, and
    OpenMP's and OpenBLAS's counts are process-wide (shared by every executable)."""
    variant = exe._latest()
    lib = getattr(variant, "lib", None)
    if lib is not None and hasattr(lib, "mdsl_set_threads"):
        lib.mdsl_set_threads(threads)


def _ort_setup(wl):
    import onnx_graphs

    model = wl.onnx()

    def setup(threads):
        session = onnx_graphs.session(model, threads)
        name = session.get_inputs()[0].name
        feeds = {name: wl.feeds["x"]}
        return lambda: session.run(None, feeds)[0]

    return setup


def _torch_setup(wl):
    def setup(threads):
        feeds = _torch_feeds(wl.feeds)
        return lambda: wl.torch(feeds)

    return setup


# -- STREAM triad ------------------------------------------------------------------------------------------
STREAM_N = 64 * 2**20  # 3 arrays of 256 MiB: far beyond every cache


def stream(threads: list[int], build_dir: Path) -> dict:
    import hand_c

    lib = hand_c.load(build_dir)
    a = np.zeros(STREAM_N, np.float32)
    b = np.ones(STREAM_N, np.float32)
    c = np.full(STREAM_N, 2.0, np.float32)
    pa, pb, pc = hand_c.ptr(a), hand_c.ptr(b), hand_c.ptr(c)
    out = {"key": "STREAM", "n": STREAM_N, "gbps": {}, "results": {}}
    for t in threads:
        lib.hc_set_threads(t)
        timing = harness.measure(lambda: lib.hc_triad(pa, pb, pc, STREAM_N, 3.0), budget_s=1.0)
        gbps = 3 * 4 * STREAM_N / timing.median_s / 1e9
        out["gbps"][str(t)] = gbps
        out["results"][str(t)] = timing.to_json()
        print(f"   STREAM  {t}T triad {gbps:.1f} GB/s ({fmt_time(timing.median_s)})", flush=True)
    assert float(a[12345]) == 7.0
    return out


# -- memory plans -----------------------------------------------------------------------------------------
def memory(threads: list[int], build_dir: Path) -> dict:
    """exe.memory for the ResNet block and BERT-base: the plan of the optimized graph (the
    same Plan the C backend compiles; building it needs no C compiler)."""
    import workloads

    import mdsl
    from examples.bert import bert
    from examples.resnet_block import build as resnet
    from mdsl.codegen.plan import build_plan

    models = {
        "ResNet block b1": lambda: resnet(batch=1),
        "ResNet block b8": lambda: resnet(batch=8),
        "BERT-base 12 layers b1": lambda: bert(12, 768, 12, seq=128, batch=1),
        "BERT-base 12 layers b8": lambda: bert(12, 768, 12, seq=128, batch=8),
    }
    out = {"key": "memory", "models": {}}
    for name, make in models.items():
        g = make()
        workloads.randomize_params(g, "")
        plan = build_plan(mdsl.optimize(g, level=2))
        m = plan.memory
        out["models"][name] = {
            "arena_bytes": m.arena_bytes,
            "lower_bound_bytes": m.lower_bound_bytes,
            "naive_bytes": m.naive_bytes,
            "kernels": len(plan.kernels),
        }
        print(
            f"   memory  {name}: arena {m.arena_bytes / 2**20:.2f} MiB, lower bound "
            f"{m.lower_bound_bytes / 2**20:.2f} MiB, naive {m.naive_bytes / 2**20:.2f} MiB",
            flush=True,
        )
    return out


# -- compile time ----------------------------------------------------------------------------------------
def compile_times(threads: list[int], build_dir: Path) -> dict:
    """optimize, build_plan and render_c of a 12-layer BERT-base graph, timed separately;
    the first mdsl.compile (with the C compiler) and cached ones."""
    import workloads

    import mdsl
    from examples.bert import bert
    from mdsl.codegen.plan import build_plan
    from mdsl.targets.c.render import render_c

    start = time.perf_counter()
    g = bert(12, 768, 12, seq=128, batch=1)
    build_s = time.perf_counter() - start
    workloads.randomize_params(g, "")
    stages = {"optimize": [], "build_plan": [], "render_c": []}
    for _ in range(3):
        t0 = time.perf_counter()
        optimized = mdsl.optimize(g, level=2)
        t1 = time.perf_counter()
        plan = build_plan(optimized)
        t2 = time.perf_counter()
        render_c(plan)
        t3 = time.perf_counter()
        for stage, took in zip(stages, (t1 - t0, t2 - t1, t3 - t2)):
            stages[stage].append(took)
    medians = {k: statistics.median(v) for k, v in stages.items()}
    start = time.perf_counter()
    mdsl.compile(g, backend="c")
    first_s = time.perf_counter() - start
    cached = []
    for _ in range(3):
        start = time.perf_counter()
        mdsl.compile(g, backend="c")
        cached.append(time.perf_counter() - start)
    out = {
        "key": "compile",
        "nodes": len(g),
        "build_graph_s": build_s,
        "stages_s": medians,
        "codegen_s": sum(medians.values()),
        "first_compile_s": first_s,
        "cached_compile_s": statistics.median(cached),
    }
    print(
        f"   compile BERT-base ({len(g)} nodes): "
        + ", ".join(f"{k} {v:.3f} s" for k, v in medians.items())
        + f"; first compile {first_s:.2f} s; cached {out['cached_compile_s']:.3f} s",
        flush=True,
    )
    return out


# -- which OpenBLAS kernel runs -----------------------------------------------------------------------------
def probe_blas(threads: list[int], build_dir: Path) -> dict:
    """threadpoolctl's view of every OpenBLAS loaded (numpy's and mdsl's scipy-openblas32)
    and the single-thread SGEMM speed of mdsl's BLAS on the W4 shape."""
    import scipy_openblas32
    from threadpoolctl import threadpool_info

    lib_path = next(
        Path(scipy_openblas32.get_lib_dir()).glob(f"lib{scipy_openblas32.get_library()}*.so*")
    )
    blas = ctypes.CDLL(str(lib_path))
    info = [
        {
            "library": Path(i["filepath"]).name,
            "version": i.get("version") or "?",
            "architecture": i.get("architecture") or "?",
            "threads": i.get("num_threads"),
        }
        for i in threadpool_info()
        if i.get("internal_api") == "openblas"
    ]
    gflops, ok = _sgemm_speed(blas)
    return {"openblas": info, "sgemm_gflops": round(gflops, 1), "sgemm_ok": ok}


def _sgemm_speed(blas) -> tuple[float, bool]:
    m, n, k = 128, 3072, 768
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), np.float32)
    blas.scipy_openblas_set_num_threads(1)
    sgemm = blas.scipy_cblas_sgemm
    sgemm.restype = None
    f = ctypes.c_float
    p = ctypes.c_void_p

    def call():
        sgemm(
            101,
            111,
            111,
            m,
            n,
            k,
            f(1.0),
            p(a.ctypes.data),
            k,
            p(b.ctypes.data),
            n,
            f(0.0),
            p(c.ctypes.data),
            n,
        )

    timing = harness.measure(call, budget_s=0.3)
    ok = bool(np.allclose(c, a.astype(np.float64) @ b, atol=1e-3, rtol=1e-4))
    return 2.0 * m * n * k / timing.median_s / 1e9, ok
