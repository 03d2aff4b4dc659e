"""What every emitted folder shares: constants as `.npy` files and the README's buffer
and kernel tables (targets add their build instructions around them)."""

from __future__ import annotations

import io

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.naming import md_cell


def npy_bytes(value: np.ndarray) -> bytes:
    """`value` as the bytes of a `.npy` file (bfloat16, which .npy cannot name, as its bits)."""
    if value.dtype == DType.bfloat16.np:
        value = value.view(np.uint16)
    buf = io.BytesIO()
    np.save(buf, np.asarray(value, order="C"), allow_pickle=False)
    return buf.getvalue()


def constant_files(plan) -> dict[str, bytes]:
    """`constants/c<i>.npy` for each constant slot of `plan`."""
    return {f"constants/c{slot}.npy": npy_bytes(v) for slot, v in enumerate(plan.constants)}


def arena_text(plan) -> str:
    m = plan.memory
    return (
        f"{m.arena_bytes} bytes, 64-byte aligned (naive {m.naive_bytes}, lower bound "
        f"{m.lower_bound_bytes})"
    )


def buffer_and_kernel_tables(plan) -> list[str]:
    """README lines: the input/output/constant buffers, then one row per kernel."""
    lines = ["", "| buffer | tensor | dtype | elements |", "|---|---|---|---|"]
    for spec in plan.buffers.values():
        if spec.kind in ("input", "output", "const"):
            where = f"`{spec.kind}s[{spec.slot}]`"
            lines.append(f"| {where} | `{md_cell(spec.tensor)}` | {spec.dtype} | {spec.elements} |")
    if plan.constants:
        lines += ["", "`consts[i]` holds `constants/c<i>.npy` (bfloat16 as its uint16 bits)."]
    if plan.callbacks:
        lines += [
            "",
            "Kernels of kind *Python callback* call `callback(index, buffers)`; mdsl's "
            "runtime answers them by running the node's Python binding.",
        ]
    lines += ["", "## Kernels", "", "| # | kernel | kind | nodes |", "|---|---|---|---|"]
    for i, k in enumerate(plan.kernels, 1):
        nodes = ", ".join(f"`{md_cell(n.name)}`" for n in k.nodes)
        lines.append(f"| {i} | `{k.name}` | {k.KIND} | {nodes} |")
    return lines
