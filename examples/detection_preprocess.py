"""Dynamic-size images and a data-dependent branch, compiled: only the taken path runs.

An image of any H x W (symbolic, 16..512) is resized to 32 x 32 and normalized by one of
two paths, chosen by `mdsl.cond` on its size: large images bilinearly with per-channel
standardization, small ones nearest with scaling to [-1, 1] (the paths are the ones of
`examples/control_flow.py`). The compiled C runs a real `if`; the profile of each call
shows the kernels of the path that ran and nothing of the other.

    python examples/detection_preprocess.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mdsl
from examples.control_flow import preprocess


def build() -> mdsl.Graph:
    h, w = mdsl.Dim("H", min=16, max=512), mdsl.Dim("W", min=16, max=512)
    with mdsl.Graph("detection_preprocess") as g:
        image = g.input("image", (1, 3, h, w))
        g.output(preprocess(image), "pixels")
    return g


def kernels_that_ran(prof) -> list[str]:
    """Names of the profiled kernels with at least one timed run."""
    return [k.name for k in prof.kernels if k.times and max(k.times) > 0]


def main() -> dict:
    g = build()
    exe = mdsl.compile(g, backend="c")
    rng = np.random.default_rng(0)
    ran = {}
    for label, size in (("small", (1, 3, 40, 60)), ("large", (1, 3, 300, 200))):
        image = (rng.random(size) * 255).astype(np.float32)
        pixels = exe(image=image)["pixels"]
        expected = mdsl.interpret(g, {"image": image})["pixels"]
        prof = exe.profile({"image": image}, runs=3)
        ran[label] = kernels_that_ran(prof)
        error = float(np.abs(pixels - expected).max())
        print(f"{label} image {size[2]}x{size[3]}: max |C - interpreter| = {error:.1e}")
        print(f"  kernels that ran: {', '.join(ran[label])}")
    return ran


if __name__ == "__main__":
    main()
