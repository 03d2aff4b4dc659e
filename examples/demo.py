"""The flagship demo: build -> optimize -> compile to C -> run -> compare -> measure.

Runs the ResNet basic block and a tiny BERT end to end, prints what each stage did, and
leaves the generated C in `build/demo/`. Run it with `make demo`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mdsl
from examples import bert, resnet_block

OUT_DIR = Path("build") / "demo"


def random_feeds(g: mdsl.Graph, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, t in g.inputs.items():
        shape = tuple(d if isinstance(d, int) else sizes[d.name] for d in t.shape)
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(t.dtype.np)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(t.dtype.np)
    return feeds


def median_ms(fn, runs: int = 20) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def run_pipeline(title: str, g: mdsl.Graph, sizes: dict[str, int]) -> None:
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)))
    print(g.summary())
    g2 = mdsl.optimize(g, level=2)
    for entry in g2.pass_log:
        if entry.changed:
            print(f"  pass {entry.name:<16} {entry.summary}")
    print(f"  nodes: {len(g)} -> {len(g2)} after optimize")

    start = time.perf_counter()
    exe = mdsl.compile(g, backend="c")
    feeds = random_feeds(g, sizes)
    out = exe(feeds)
    print(
        f"  compiled to C and ran in {time.perf_counter() - start:.2f} s "
        f"({len(exe.kernels)} kernels)"
    )

    report = mdsl.compare(g, feeds, backend="c", reference="python")
    print(f"  compare vs interpreter: {'OK' if report.ok else 'MISMATCH'}")
    if not report.ok:
        print(report.table())
    ref = mdsl.interpret(g, feeds)
    worst = max(float(np.abs(out[k] - ref[k]).max()) for k in ref)
    print(f"  max |c - interpreter| over outputs: {worst:.2e}")

    c_ms = median_ms(lambda: exe(feeds))
    py_ms = median_ms(lambda: mdsl.interpret(g, feeds), runs=3)
    print(f"  time per run: C {c_ms:.3f} ms, interpreter {py_ms:.3f} ms ({py_ms / c_ms:.1f}x)")
    print(f"  memory: {exe.memory.summary()}")
    profile = exe.profile(feeds, runs=5)
    print("  profile (slowest kernels):")
    print("\n".join("    " + line for line in profile.table(top=5).splitlines()[:12]))

    folder = OUT_DIR / g.name
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in exe.sources.items():
        (folder / name).write_text(text)
    print(f"  generated sources in {folder}/")


def main() -> None:
    start = time.perf_counter()
    run_pipeline("ResNet basic block (N=2, 64x56x56)", resnet_block.build(), {"N": 2})
    run_pipeline("BERT tiny (2 layers, hidden 64)", bert.build(), {"B": 2, "S": 16})
    print(f"\ndemo finished in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
