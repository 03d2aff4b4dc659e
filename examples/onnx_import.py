"""Path A, from PyTorch: export a small model to ONNX, import it, look at it, compile it
to C and check it node by node against the interpreter and against PyTorch.

Run it with `python examples/onnx_import.py` (writes `build/onnx_import/`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mdsl

OUT_DIR = Path("build") / "onnx_import"


def torch_model():
    """A small CNN classifier: conv-BN-ReLU, pooling, a linear head."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).eval()


def export_onnx(model, path: Path) -> None:
    import torch

    example = torch.randn(1, 3, 32, 32)
    torch.onnx.export(
        model,
        (example,),
        str(path),
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
        dynamo=False,
    )


def main() -> dict:
    import torch

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    model = torch_model()
    onnx_path = OUT_DIR / "cnn.onnx"
    export_onnx(model, onnx_path)

    g = mdsl.frontends.onnx.load(onnx_path)  # dim "N" stays symbolic
    print(g.summary())
    (OUT_DIR / "cnn.dot").write_text(mdsl.viz.to_dot(g))

    image = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    exe = mdsl.compile(g, backend="c")
    logits = exe(image=image)["logits"]
    report = mdsl.compare(g, {"image": image}, backend="c", reference="python")
    with torch.no_grad():
        expected = model(torch.from_numpy(image)).numpy()
    error = float(np.abs(logits - expected).max())
    print(f"compare C vs interpreter: {'OK' if report.ok else 'MISMATCH'}")
    print(f"max |mdsl C - PyTorch| = {error:.2e} over {logits.shape} logits")
    print(f"{len(exe.kernels)} kernels; memory {exe.memory.summary()}")
    return {"ok": report.ok, "error": error, "graph": g}


if __name__ == "__main__":
    main()
