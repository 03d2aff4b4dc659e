"""Renders the benchmark results as RESULTS.md and checks the targets of the codegen issue and
issue 16 (CPU speed against ONNX Runtime)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from worker import fmt_time

IMPL_ORDER = [
    "mdsl-c",
    "mdsl-numba",
    "onnxruntime",
    "torch",
    "numpy",
    "hand-C",
    "hand-C libm",
    "bare cffi call",
]

# Figures the issue reports for this machine (1 thread), shown next to ours.
ISSUE_FIGURES = {
    "W1-4M": {"numpy": 18.2e-3, "onnxruntime": 6.6e-3, "hand-C": 2.3e-3},
    "W2": {"numpy": 4.6e-3, "onnxruntime": 1.2e-3, "hand-C": 0.66e-3},
    "W3": {"numpy": 45e-3, "onnxruntime": 3.3e-3, "hand-C": 4.4e-3},
    "W4": {"onnxruntime": 5.6e-3},
    "W5-b1": {"onnxruntime": 9.5e-3},
    "W6-b1": {"onnxruntime": 1.84e-3},
    "W7": {"onnxruntime": 14e-6, "numpy": 22e-6, "bare cffi call": 1e-6},
}


@dataclass(frozen=True)
class Target:
    """`numerator / denominator` (median times of two implementations) against `limit`."""

    key: str
    numerator: str
    denominator: str
    limit: float
    at_most: bool = True

    def label(self) -> str:
        if self.at_most:
            return f"{self.key}: {self.numerator} / {self.denominator} <= {self.limit:g}"
        return f"{self.key}: {self.numerator} / {self.denominator} >= {self.limit:g}"

    def met(self, ratio: float) -> bool:
        return ratio <= self.limit if self.at_most else ratio >= self.limit


TARGETS = [
    *(Target(k, "mdsl-c", "hand-C", 1.2) for k in ("W1-4M", "W1-64K", "W2")),
    *(Target(k, "onnxruntime", "mdsl-c", 2.0, at_most=False) for k in ("W1-4M", "W1-64K", "W2")),
    Target("W3", "mdsl-c", "onnxruntime", 1.0),
    *(Target(k, "mdsl-c", "onnxruntime", 1.05) for k in ("W4", "W5-b1", "W5-b8")),
    *(Target(k, "mdsl-c", "onnxruntime", 1.2) for k in ("W6-b1", "W6-b8")),
    Target("W7", "mdsl-c", "onnxruntime", 0.5),
    # issue 16 (CPU speed against ONNX Runtime) asks for more, at 1 and 2 threads
    *(Target(k, "mdsl-c", "onnxruntime", 0.5) for k in ("W1-4M", "W1-64K")),
    Target("W2", "mdsl-c", "onnxruntime", 0.6),
    *(Target(k, "mdsl-c", "onnxruntime", 1.0) for k in ("W4", "W5-b1", "W5-b8", "W6-b1", "W6-b8")),
    Target("W7", "mdsl-c", "onnxruntime", 0.2),
]


def _by_key(results: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in results}


def median(result: dict, impl: str, threads: int) -> float | None:
    entry = result.get("results", {}).get(impl, {}).get(str(threads), {})
    return entry.get("median_s")


def target_rows(
    results: list[dict], threads: list[int]
) -> list[tuple[str, int, float | None, str]]:
    """(target label, threads, ratio, "met"/"missed"/"n/a") for every target and thread count."""
    by_key = _by_key(results)
    rows = []
    for target in TARGETS:
        if target.key not in by_key:
            continue
        for t in threads:
            num = median(by_key[target.key], target.numerator, t)
            den = median(by_key[target.key], target.denominator, t)
            if num is None or den is None:
                rows.append((target.label(), t, None, "n/a"))
                continue
            ratio = num / den
            rows.append((target.label(), t, ratio, "met" if target.met(ratio) else "missed"))
    rows += _memory_rows(by_key.get("memory"))
    rows += _compile_rows(by_key.get("compile"))
    return rows


def _memory_rows(result: dict | None) -> list:
    if not result or "models" not in result:
        return []
    rows = []
    for name, m in result["models"].items():
        tight = m["arena_bytes"] / m["lower_bound_bytes"]
        saved = m["arena_bytes"] / m["naive_bytes"]
        rows.append(
            (
                f"memory {name}: arena / lower bound <= 1.05",
                0,
                tight,
                "met" if tight <= 1.05 else "missed",
            )
        )
        rows.append(
            (f"memory {name}: arena / naive < 0.6", 0, saved, "met" if saved < 0.6 else "missed")
        )
    return rows


def _compile_rows(result: dict | None) -> list:
    if not result or "codegen_s" not in result:
        return []
    codegen, cached = result["codegen_s"], result["cached_compile_s"]
    return [
        (
            "compile BERT-base: optimize + plan + render_c < 2 s",
            0,
            codegen,
            "met" if codegen < 2 else "missed",
        ),
        (
            "compile BERT-base: cached mdsl.compile < 0.3 s",
            0,
            cached,
            "met" if cached < 0.3 else "missed",
        ),
    ]


def target_summary(results: list[dict], threads: list[int]) -> str:
    lines = ["targets:"]
    for label, t, ratio, verdict in target_rows(results, threads):
        shown = "-" if ratio is None else f"{ratio:.3g}"
        where = f" [{t}T]" if t else ""
        lines.append(f"  {verdict:6s} {label}{where}: {shown}")
    return "\n".join(lines)


# -- RESULTS.md ---------------------------------------------------------------------------------------
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def write_results(path, section: str) -> None:
    """Put `section` between this script's markers in `path`, leaving the rest of the file
    (sections other scripts maintain) as it is."""
    block = f"{START}\n{section.rstrip()}\n{END}"
    text = path.read_text() if path.is_file() else "# Benchmark results\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        title, newline, body = text.partition("\n")
        if not title.startswith("# "):
            title, newline, body = "# Benchmark results", "\n", text
        text = f"{title}\n\n{block}\n{newline}{body.lstrip(chr(10))}"
    path.write_text(text if text.endswith("\n") else text + "\n")


# -- the section ---------------------------------------------------------------------------------------
def render(facts, probes, env_note, results, threads, elapsed) -> str:
    by_key = _by_key(results)
    busy = [r["key"] for r in results if r["key"] != "memory" and _busy(r) > 0.1]
    warning = (
        [
            f"**Other processes kept the CPUs busy during {', '.join(busy)}: those figures "
            "are not reliable.**",
            "",
        ]
        if busy
        else []
    )
    out = [
        "## Performance: `make bench`",
        "",
        f"Written by `make bench` (`benchmarks/run.py`) on {time.strftime('%Y-%m-%d')} in "
        f"{elapsed:.0f} s. Each workload ran in its own process, its contenders taking turns "
        "after warmup: rounds in which each runs a block of about 10 ms of calls (at 2 threads "
        "after 0.2 s of sleep, so the last contender's spinning pool has gone to sleep). Times "
        "are the medians of those blocks' per-call times. Ratios are time / time "
        "(below 1 is faster than the reference named in the column).",
        "",
        *warning,
        *_machine_section(facts, probes, env_note),
        *_targets_section(results, threads),
        *_stream_section(by_key.get("STREAM")),
    ]
    for result in results:
        if result["key"] in ("STREAM", "memory", "compile"):
            continue
        out += _workload_section(result, threads, by_key.get("STREAM"))
    out += _memory_section(by_key.get("memory"))
    out += _compile_section(by_key.get("compile"))
    return "\n".join(out) + "\n"


def _machine_section(facts, probes, env_note) -> list[str]:
    lines = [
        "### Machine",
        "",
        f"- CPU: {facts['cpu']}, {facts['cores']} cores; vector ISA: {facts['vector_isa']}",
        f"- mdsl revision {facts.get('revision', '?')}",
        f"- Python {facts['python']}, numpy {facts['numpy']}, torch {facts['torch']}, "
        f"onnxruntime {facts['onnxruntime']}, {facts['gcc']}",
        f"- BLAS environment of the parent: {facts['blas_env']}; benchmark processes: {env_note}",
        "",
        "| setting | OpenBLAS libraries (threadpoolctl: version, kernel) | mdsl SGEMM 128x3072x768, 1 thread |",
        "| --- | --- | --- |",
    ]
    for label, probe in probes.items():
        if "error" in probe:
            lines.append(f"| {label} | probe failed: {probe['error'][:120]} | |")
            continue
        libs = "; ".join(
            f"{b['library']} {b['version']} **{b['architecture']}**" for b in probe["openblas"]
        )
        ok = "" if probe.get("sgemm_ok") else " (WRONG RESULT)"
        lines.append(f"| {label} | {libs} | {probe['sgemm_gflops']} GFLOP/s{ok} |")
    return [*lines, ""]


def _targets_section(results, threads) -> list[str]:
    lines = [
        "### Targets (codegen issue, Performance; issue 16, CPU speed against ONNX Runtime)",
        "",
        "| target | threads | measured | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for label, t, ratio, verdict in target_rows(results, threads):
        shown = "-" if ratio is None else f"{ratio:.3g}"
        lines.append(f"| {label} | {t or '-'} | {shown} | {verdict} |")
    return [*lines, ""]


def _stream_section(result) -> list[str]:
    if not result or "gbps" not in result:
        return []
    figures = ", ".join(f"{v:.1f} GB/s at {t} thread(s)" for t, v in result["gbps"].items())
    return [
        "### Memory bandwidth (STREAM triad, float32, 3 x 256 MiB)",
        "",
        figures,
        "",
        *_busy_note(result),
        "",
    ]


def l3_mib() -> str:
    """The L3 cache size, from sysfs (sysconf reports 0 on some virtual machines)."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
        return text.replace("K", " KiB").replace("M", " MiB")
    except OSError:
        return "size unknown"


def _busy(result: dict) -> float:
    return max(result.get(k) or 0.0 for k in ("busy_before", "busy_during", "busy_after"))


def _busy_note(result: dict) -> list[str]:
    if result.get("busy_before") is None:
        return []
    flag = " **(a busy machine: figures are not reliable)**" if _busy(result) > 0.1 else ""
    shares = " / ".join(
        "-" if result.get(k) is None else f"{result[k]:.0%}"
        for k in ("busy_before", "busy_during", "busy_after")
    )
    return [
        f"- CPU share other processes used just before / while / just after it ran: {shares}{flag}"
    ]


def _rate(result: dict, seconds: float) -> str:
    if result.get("flops"):
        return f"{result['flops'] / seconds / 1e9:.0f} GFLOP/s"
    if result.get("bytes_moved"):
        return f"{result['bytes_moved'] / seconds / 1e9:.1f} GB/s"
    return ""


def _workload_section(result: dict, threads: list[int], stream: dict | None) -> list[str]:
    key = result["key"]
    if "error" in result:
        return [f"### {key}", "", f"failed: {result['error']}", ""]
    lines = [f"### {key}: {result['title']}", ""]
    lines += [f"- {n}" for n in result.get("notes", [])]
    lines += _busy_note(result)
    lines += [f"- stderr: `{n[:200]}`" for n in result.get("stderr_notes", [])[:5]]
    if stream and "gbps" in stream and result.get("bytes_moved"):
        floor = result["bytes_moved"] / (stream["gbps"]["1"] * 1e9)
        moved = result["bytes_moved"] / 2**20
        lines.append(
            f"- {moved:.0f} MiB moved: {fmt_time(floor)} at the 1-thread STREAM triad bandwidth "
            f"(a DRAM floor only for data larger than the L3 cache, {l3_mib()} here)"
        )
    if lines[-1]:
        lines.append("")
    refs = [r for r in ("onnxruntime", "hand-C") if r in result["results"]]
    head = ["implementation", *(f"{t}T" for t in threads)]
    head += [f"{t}T / {r}" for r in refs for t in threads]
    head += ["rate (1T)", "1T min", "max abs err", "issue's figure (1T)"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    names = sorted(result["results"], key=lambda n: IMPL_ORDER.index(n) if n in IMPL_ORDER else 99)
    for name in names:
        lines.append("| " + " | ".join(_row(result, name, threads, refs)) + " |")
    lines += _kernel_lines(result.get("kernels"), threads[0])
    compile_s = result.get("compile_s", {})
    if "mdsl-c" in compile_s:
        lines += [
            "",
            f"mdsl-c first compile (optimize + codegen + gcc, or cache hit): "
            f"{compile_s['mdsl-c']:.2f} s",
        ]
    return [*lines, ""]


def _row(result: dict, name: str, threads: list[int], refs: list[str]) -> list[str]:
    per_t = result["results"][name]
    cells = [name]
    for t in threads:
        entry = per_t.get(str(t), {})
        if "median_s" in entry:
            cells.append(fmt_time(entry["median_s"]))
        else:
            cells.append(entry.get("skipped") or entry.get("error", "-")[:80])
    for ref in refs:
        for t in threads:
            mine, theirs = median(result, name, t), median(result, ref, t)
            cells.append(f"{mine / theirs:.2f}" if mine and theirs else "-")
    first = median(result, name, threads[0])
    cells.append(_rate(result, first) if first else "")
    entry = per_t.get(str(threads[0]), {})
    cells.append(fmt_time(entry["min_s"]) if "min_s" in entry else "")
    err = entry.get("max_abs_err")
    cells.append(
        "" if err is None else f"{err:.1e}" + ("" if entry.get("ok", True) else " MISMATCH")
    )
    issue = ISSUE_FIGURES.get(result["key"], {}).get(name)
    cells.append(fmt_time(issue) if issue else "")
    return cells


def _kernel_lines(kernels, threads: int) -> list[str]:
    if not kernels:
        return []
    title = (
        f"mdsl-c kernels at {threads} thread(s) (`exe.profile`, median of 5 runs, slowest first):"
    )
    if isinstance(kernels, str):
        return ["", f"{title} {kernels}"]
    lines = [
        "",
        title,
        "",
        "| kernel | kind | ops | time | share | GFLOP/s | GB/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k in kernels:
        lines.append(
            f"| {k['name']} | {k['kind']} | {k['ops'][:60]} | {fmt_time(k['median_s'])} | "
            f"{k['share']:.0%} | {k['gflops']:.1f} | {k['gbps']:.1f} |"
        )
    return lines


def _memory_section(result) -> list[str]:
    if not result or "models" not in result:
        return []
    lines = [
        "### Memory plans (`exe.memory`)",
        "",
        "The plan of the optimized graph, as the C backend compiles it. Inputs, outputs and "
        "weights live outside the arena.",
        "",
        "| model | kernels | arena | lower bound | naive | arena / lower bound | arena / naive |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, m in result["models"].items():
        a, lb, nv = m["arena_bytes"], m["lower_bound_bytes"], m["naive_bytes"]
        lines.append(
            f"| {name} | {m['kernels']} | {a / 2**20:.2f} MiB | {lb / 2**20:.2f} MiB | "
            f"{nv / 2**20:.2f} MiB | {a / lb:.3f} | {a / nv:.3f} |"
        )
    return [*lines, ""]


def _compile_section(result) -> list[str]:
    if not result or "stages_s" not in result:
        return []
    stages = ", ".join(f"`{k}` {v:.3f} s" for k, v in result["stages_s"].items())
    return [
        "### Compile time: 12-layer BERT-base, seq 128, batch 1",
        "",
        f"- graph: {result['nodes']} nodes, built in {result['build_graph_s']:.3f} s",
        f"- optimize + codegen without the C compiler: {result['codegen_s']:.3f} s ({stages}; "
        "medians of 3)",
        f"- first `mdsl.compile` (with gcc, or a cache hit from an earlier run): "
        f"{result['first_compile_s']:.2f} s",
        f"- cached `mdsl.compile`: {result['cached_compile_s']:.3f} s (median of 3)",
        "",
    ]
