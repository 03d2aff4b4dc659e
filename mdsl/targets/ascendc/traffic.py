"""Global-memory bytes a kernel moves per call, estimated from its Kernel IR, next to the
minimum (every input read once, every output written once).

A row kernel whose row fits in the UB reads it once and keeps it there for every phase
(softmax: the maximum, the sum of exponentials, the normalized store), so it moves the
minimum; a longer row streams through the UB once per phase that reads it, a multiple of
the minimum. The README lists both so a reviewer sees what a fused kernel costs.

>>> import mdsl
>>> from mdsl.targets.ascendc import build_project
>>> with mdsl.Graph("sm") as g:
...     g.output(mdsl.ops.softmax(g.input("x", (4, 64)), axis=-1), "y")
>>> p = build_project(g)
>>> (pk,) = p.kernels
>>> gm_bytes(pk.kernel), minimum_bytes(pk.kernel, p.plan)
(2048, 2048)
>>> (pk,) = build_project(g, tile_length=32).kernels            # streamed: three reads
>>> gm_bytes(pk.kernel)
4096
"""

from __future__ import annotations

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.targets.ascendc.kernels import (
    Im2colKernel,
    MatmulKernel,
    RowKernel,
    RowStorePhase,
    ScalarStorePhase,
    Stream,
    VectorKernel,
)


def _stream_bytes(s: Stream, rows: int, row_length: int) -> int:
    return rows * (row_length if s.is_tile else 1) * s.dtype.itemsize


def _names(value, lets: dict) -> set[str]:
    """Variables `value` reads, through the lets it uses."""
    seen, todo = set(), list(E.variables(value))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in lets:
            todo += list(E.variables(lets[name]))
    return seen


def gm_bytes(k) -> int:
    """Bytes read and written in global memory by one call of kernel `k` (an estimate:
    matmul operands counted once)."""
    if isinstance(k, VectorKernel):
        loads = sum(_stream_bytes(s, k.rows, k.row_length) for s in k.loads.values())
        return loads + sum(_stream_bytes(s, k.rows, k.row_length) for s, _ in k.stores)
    if isinstance(k, RowKernel):
        return _row_bytes(k)
    if isinstance(k, MatmulKernel):
        operands = k.batch * (k.m * k.k + k.k * k.n) * k.dtype.itemsize
        if k.result_in_ub:  # the epilogue reads C in the UB and stores the output
            return operands + _epilogue_bytes(k)
        total = operands + k.batch * k.m * k.n * k.out_dtype.itemsize
        if k.epilogue is not None:  # C goes to GM, the epilogue reads it back
            total += gm_bytes(k.epilogue)
        return total
    if isinstance(k, Im2colKernel):
        return k.units * k.width * 4 + k.col_elements * 4
    return 0


def _epilogue_bytes(k: MatmulKernel) -> int:
    """An epilogue on the result in the UB: its operands (one every row of a block reads,
    outer stride 0 along M, is loaded once per block; later blocks find it in L2, so it
    counts once per batch it varies over) and its stores; `acc` moves no GM bytes."""
    ep = k.epilogue
    total = sum(_stream_bytes(s, ep.rows, ep.row_length) for s, _ in ep.stores)
    for name, s in ep.loads.items():
        if name == "acc":
            continue
        shared = s.is_tile and not (s.outer and s.outer[-1])
        varies = k.batch if any(s.outer[:-1]) else 1
        total += _stream_bytes(s, varies if shared else ep.rows, ep.row_length)
    return total


def _row_bytes(k: RowKernel) -> int:
    """Per phase, the loads it reads (a resident row: only the first time) and its store."""
    lets: dict = {}
    total, loaded = 0, set()
    for phase in k.phases:
        if isinstance(phase, kir.Reduce):
            lets.update({let.var: let.value for let in phase.lets})
            value = phase.value
        elif isinstance(phase, kir.Let):
            lets[phase.var] = phase.value
            continue
        else:
            value = phase.value
        read = _names(value, lets) - loaded
        total += sum(_row_load_bytes(k, s) for n, s in k.loads.items() if n in read)
        if k.resident:
            loaded |= read
        if isinstance(phase, (RowStorePhase, ScalarStorePhase)):
            total += _stream_bytes(phase.stream, k.rows, k.row_length)
    return total


def _row_load_bytes(k: RowKernel, s: Stream) -> int:
    """A resident row kernel reads an operand shared by every row (outer strides 0) once
    per core; the cores after the first find it in L2, so it counts once."""
    shared = k.resident and s.is_tile and not any(s.outer)
    return _stream_bytes(s, 1 if shared else k.rows, k.row_length)


def minimum_bytes(k, plan) -> int:
    """Every global buffer the kernel touches, once (im2col: its columns too)."""
    from mdsl.targets.ascendc.render import kernel_buffers

    total = 0
    for name in kernel_buffers(k):
        spec = plan.buffers[name]
        total += spec.elements * spec.dtype.itemsize
    if isinstance(k, Im2colKernel):
        total += k.col_elements * 4
    return total
