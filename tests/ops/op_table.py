"""The table behind the op tests: one `OpCase` per (op, inputs, attrs, dtype) combination.

Each case builds a one-op graph, runs it through the interpreter (`mdsl.interpret`), and
checks the result against PyTorch (`torch_ref`) where PyTorch has the op, and otherwise
against an independent numpy expression (`numpy_ref`). Error cases (`raises`) check the
exception type raised while building.

Families add their cases in `cases_<family>.py` modules as a list named CASES;
`test_op_table.py` collects them all.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import mdsl


@dataclass
class OpCase:
    """One row of the op table.

    build: called inside a graph with the input Tensors, returns the output Tensor(s).
    inputs: name -> numpy array (becomes a graph input of that shape and dtype).
    torch_ref / numpy_ref: called with the input arrays (torch tensors for torch_ref) in
    `inputs` order, return the expected output(s).
    raises: an mdsl error type the build must raise instead (refs then unused).
    """

    op: str
    build: Callable
    inputs: dict[str, np.ndarray]
    torch_ref: Callable | None = None
    numpy_ref: Callable | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    raises: type | None = None
    id: str = ""
    symbolic: dict[str, tuple] = field(default_factory=dict)  # input name -> declared shape

    def name(self) -> str:
        return f"{self.op}-{self.id}" if self.id else self.op


def rand(*shape, dtype="float32", lo=-2.0, hi=2.0, seed=0) -> np.ndarray:
    """Deterministic random data of `shape` and `dtype`."""
    # crc32, not hash(): str hashes change from one process to the next
    rng = np.random.default_rng(zlib.crc32(repr((shape, str(dtype), lo, hi, seed)).encode()))
    dt = mdsl.DType.of(dtype).np
    if np.issubdtype(dt, np.integer):
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dt)
    if dt == np.bool_:
        return rng.random(shape) > 0.5
    return rng.uniform(lo, hi, size=shape).astype(dt)


def build_graph(case: OpCase) -> mdsl.Graph:
    with mdsl.Graph(case.name()) as g:
        tensors = [
            g.input(n, case.symbolic.get(n, a.shape), mdsl.DType.of(a.dtype))
            for n, a in case.inputs.items()
        ]
        out = case.build(*tensors)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for i, t in enumerate(outs):
            g.output(t, f"y{i}")
    return g


def expected_outputs(case: OpCase) -> list[np.ndarray]:
    arrays = list(case.inputs.values())
    if case.torch_ref is not None:
        import torch

        result = case.torch_ref(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
        results = result if isinstance(result, (tuple, list)) else (result,)
        return [r.numpy() if hasattr(r, "numpy") else np.asarray(r) for r in results]
    result = case.numpy_ref(*arrays)
    return list(result) if isinstance(result, (tuple, list)) else [result]
